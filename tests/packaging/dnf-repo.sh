#!/usr/bin/env bash
# dnf-repo.sh REPO VERSION: the rpm repository of `make repo` (REPO/rpm, its
# key REPO/yunion-mps.asc) read by dnf as a RHEL-family host reads it, with
# the checks the repository's .repo file turns on (gpgcheck, repo_gpgcheck):
#
#   1. `dnf --repofrompath ... repoquery` finds yunion-mps-daemon,
#      yunion-mps-inventory and yunion-mps-daemon-kubernetes at VERSION for
#      x86_64 and for aarch64; dnf has
#      verified repomd.xml against repomd.xml.asc with the key to get there.
#   2. `dnf download` of every package (dnf checks each against the checksums
#      of the signed metadata), then rpm's signature check with only our key
#      known: "digests signatures OK".
#   3. Tampering is refused: a package changed in place (its checksum no
#      longer matches the metadata), metadata regenerated around the changed
#      package (the signature no longer matches repomd.xml), a changed
#      repomd.xml.asc, and a repository without a signature.
#
# dnf and createrepo_c are Debian's (dnf, dnf-plugins-core, createrepo-c): no
# RHEL host or mirror is needed. Everything lives in a scratch directory: dnf's
# configuration, cache and installroot, rpm's database. run.sh runs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
repo=$(cd "${1:?usage: dnf-repo.sh REPO VERSION}" && pwd)
version=${2:?usage: dnf-repo.sh REPO VERSION}
for tool in dnf createrepo_c rpmkeys gpg; do
	command -v "$tool" >/dev/null || fail "dnf-repo.sh needs $tool (.ci/run installs it)"
done
dnf download --help >/dev/null 2>&1 || fail "dnf-repo.sh needs dnf download (dnf-plugins-core)"

scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/mps-dnf.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
printf '[main]\ngpgcheck=1\nrepo_gpgcheck=1\ninstallonly_limit=3\nclean_requirements_on_remove=True\nbest=True\nskip_if_unavailable=False\n' >"$scratch/dnf.conf"
mkdir -p "$scratch/repos.d"

# mdnf REPO_DIR NAME ARGS...: dnf with nothing of this host's: its own
# configuration, no other repository (the local plugin of dnf-plugins-core
# off: it adds one), a fresh cache per NAME, an empty installroot; the
# repository at REPO_DIR as the runbook's .repo file has it.
mdnf() {
	local dir=$1 name=$2
	shift 2
	dnf -y --config="$scratch/dnf.conf" --setopt=reposdir="$scratch/repos.d" --disableplugin=local \
		--installroot="$scratch/root-$name" --releasever=9 --setopt=cachedir="$scratch/cache-$name" \
		--repofrompath="mps-$name,file://$dir/rpm" \
		--setopt="mps-$name.gpgcheck=1" --setopt="mps-$name.repo_gpgcheck=1" \
		--setopt="mps-$name.gpgkey=file://$repo/yunion-mps.asc" "$@"
}

# ---------------------------------------------------------------- queries
out=$(mdnf "$repo" good repoquery --qf '%{name} %{epoch}:%{version}-%{release} %{arch}' 2>"$scratch/err") ||
	fail "dnf repoquery: $(cat "$scratch/err")"
printf '%s\n' "$out" | sed 's/^/   | /'
for arch in x86_64 aarch64; do
	for pkg in yunion-mps-daemon yunion-mps-inventory yunion-mps-daemon-kubernetes; do
		assert_contains "dnf repoquery" "$out" "$pkg 1:$version-1 $arch"
	done
done
# repo_gpgcheck: dnf kept the key it checked repomd.xml with.
assert_contains "dnf's view of the repository" "$(mdnf "$repo" good repoinfo 2>&1)" "mps-good"

# -------------------------------------------------------- package signatures
mkdir "$scratch/dl" "$scratch/rpmdb"
for arch in x86_64 aarch64; do
	mdnf "$repo" good --forcearch="$arch" download --destdir="$scratch/dl" yunion-mps-daemon yunion-mps-inventory yunion-mps-daemon-kubernetes \
		>"$scratch/out" 2>&1 || fail "dnf download ($arch): $(cat "$scratch/out")"
done
assert_eq "packages downloaded" "$(ls "$scratch/dl" | wc -l)" 6
rpmkeys --dbpath "$scratch/rpmdb" --import "$repo/yunion-mps.asc"
for f in "$scratch"/dl/*.rpm; do
	out=$(rpmkeys --dbpath "$scratch/rpmdb" --checksig "$f")
	assert_contains "rpmkeys --checksig $(basename "$f")" "$out" "digests signatures OK"
done

# -------------------------------------------------------------- tampering
# tampered NAME: a copy of the repository to change.
tampered() {
	rm -rf "$scratch/$1"
	cp -a "$repo" "$scratch/$1"
	echo "$scratch/$1"
}
# refused NAME WHAT PATTERN ARGS...: dnf ARGS on the copy NAME must fail and
# say PATTERN (an extended regular expression).
refused() {
	local name=$1 what=$2 pattern=$3 out
	shift 3
	if out=$(mdnf "$scratch/$name" "$name" "$@" 2>&1); then
		fail "dnf accepted $what:"$'\n'"$out"
	fi
	printf "%s\n" "$out" | grep -Eq "$pattern" || fail "dnf refused $what, but not saying /$pattern/:"$'\n'"$out"
	note "ok: refused $what: $(printf "%s\n" "$out" | grep -E "$pattern" | tail -n 1)"
}

# A package changed after the metadata was signed: one byte of its payload.
t=$(tampered pkg)
f=$(ls "$t"/rpm/yunion-mps-daemon-[0-9]*.x86_64.rpm)
size=$(stat -c %s "$f")
printf 'X' | dd of="$f" bs=1 seek=$((size - 100)) conv=notrunc status=none
refused pkg "a changed package" 'has incorrect checksum' \
	--forcearch=x86_64 download --destdir="$scratch/dl-pkg" yunion-mps-daemon

# The same package, with the metadata made again around it (what someone
# without the key can do): repomd.xml no longer matches its signature.
t=$(tampered meta)
f=$(ls "$t"/rpm/yunion-mps-daemon-[0-9]*.x86_64.rpm)
printf 'X' | dd of="$f" bs=1 seek=$((size - 100)) conv=notrunc status=none
createrepo_c --quiet --update "$t/rpm"
refused meta "metadata regenerated without the key" 'repomd.xml GPG signature verification error' repoquery

# A primary.xml changed in place: its checksum in the signed repomd.xml.
t=$(tampered primary)
p=$(ls "$t"/rpm/repodata/*-primary.xml.gz)
gzip -dc "$p" | sed 's/yunion-mps-inventory/yunion-mps-inventorx/' | gzip -9n >"$p.new"
mv "$p.new" "$p"
refused primary "a changed primary.xml" "checksum doesn't match" repoquery

# repomd.xml.asc of another key.
t=$(tampered sig)
GNUPGHOME=$scratch/other-gnupg
export GNUPGHOME
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key 'someone else <other@example.org>' rsa2048 sign 1d
gpg --batch --yes --armor --detach-sign -o "$t/rpm/repodata/repomd.xml.asc" "$t/rpm/repodata/repomd.xml"
gpgconf --kill gpg-agent 2>/dev/null || true
unset GNUPGHOME
refused sig "repomd.xml signed by another key" 'repomd.xml GPG signature verification error' repoquery

# No signature at all.
t=$(tampered unsigned)
rm "$t/rpm/repodata/repomd.xml.asc"
refused unsigned "a repository without repomd.xml.asc" 'GPG signature is not available' repoquery
