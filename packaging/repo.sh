#!/bin/sh
# repo.sh builds, in $REPO, a signed apt repository and a signed yum/dnf
# repository of the packages in $DIST (`make package`: amd64 and arm64), ready
# to be served by any static web server at $REPO_URL. `make repo` runs it.
#
#   $REPO/yunion-mps.asc            the public key (apt's signed-by, rpm's gpgkey)
#   $REPO/yunion-mps.repo           for /etc/yum.repos.d/
#   $REPO/yunion-mps.list           for /etc/apt/sources.list.d/
#   $REPO/deb/dists/stable/...      Release, InRelease, Release.gpg, Packages
#   $REPO/deb/pool/main/*.deb
#   $REPO/rpm/*.rpm                 signed with the same key
#   $REPO/rpm/repodata/             createrepo_c, repomd.xml.asc
#
# Environment (all optional):
#   DIST, REPO, BUILD     dist, repo, .build
#   REPO_URL              where $REPO will be served (written into the .repo
#                         and .list files)
#   REPO_KEY_FILE         armored private key to sign with (a maintainer's);
#                         REPO_KEY_PASSPHRASE its passphrase. Without it, a
#                         throwaway key is made once in $BUILD/repo-key and
#                         reused: fine for tests, never for a published repo.
#
# Needs apt-ftparchive (apt-utils), gpg, rpmsign (rpm), createrepo_c
# (createrepo-c). docs/packaging.md ("The repository").
set -eu
cd "$(dirname "$0")/.."

DIST=${DIST:-dist}
REPO=${REPO:-repo}
BUILD=${BUILD:-.build}
REPO_URL=${REPO_URL:-https://mps.example.org/yunion-mps}
REPO_URL=${REPO_URL%/}
SUITE=stable
COMPONENT=main
ARCHES="amd64 arm64"

for tool in apt-ftparchive gpg gpgconf rpmsign createrepo_c; do
	command -v "$tool" >/dev/null || { echo "repo.sh: needs $tool" >&2; exit 1; }
done
set -- "$DIST"/*.deb
[ -e "$1" ] || { echo "repo.sh: no .deb in $DIST: run make package" >&2; exit 1; }
for a in $ARCHES; do
	ls "$DIST"/*_"$a".deb >/dev/null 2>&1 || { echo "repo.sh: no $a .deb in $DIST" >&2; exit 1; }
done

# A keyring of this run only: the signing key and nothing else.
GNUPGHOME=$(mktemp -d "${TMPDIR:-/tmp}/mps-repo-gnupg.XXXXXX")
export GNUPGHOME
echo 'trust-model always' >"$GNUPGHOME/gpg.conf"
trap 'gpgconf --kill gpg-agent 2>/dev/null || true; rm -rf "$GNUPGHOME"' EXIT
if [ -n "${REPO_KEY_FILE:-}" ]; then
	gpg --batch --quiet --import "$REPO_KEY_FILE"
else
	keydir=$BUILD/repo-key
	if [ ! -s "$keydir/secret.asc" ]; then
		mkdir -p "$keydir"
		chmod 0700 "$keydir"
		# RSA: rpm before 4.16 (EL7, EL8) verifies nothing else.
		gpg --batch --quiet --passphrase '' --quick-gen-key \
			'yunion-mps-daemon repository, THROWAWAY TEST KEY <mps-daemon@example.org>' rsa3072 sign 1y
		gpg --batch --armor --export-secret-keys >"$keydir/secret.asc.tmp"
		mv "$keydir/secret.asc.tmp" "$keydir/secret.asc"
	else
		gpg --batch --quiet --import "$keydir/secret.asc"
	fi
	echo "repo.sh: signed with the throwaway key in $keydir (set REPO_KEY_FILE for a real repository)" >&2
fi
fpr=$(gpg --batch --with-colons --list-secret-keys | awk -F: '$1 == "fpr" { print $10; exit }')
[ -n "$fpr" ] || { echo "repo.sh: no secret key to sign with" >&2; exit 1; }
passfile=$GNUPGHOME/passphrase
printf '%s' "${REPO_KEY_PASSPHRASE:-}" >"$passfile"
sign() {
	gpg --batch --yes --pinentry-mode loopback --passphrase-file "$passfile" \
		--local-user "$fpr" --digest-algo SHA256 "$@"
}

rm -rf "$REPO.tmp"
mkdir -p "$REPO.tmp"
gpg --batch --armor --export "$fpr" >"$REPO.tmp/yunion-mps.asc"

# ------------------------------------------------------------------ apt
deb=$REPO.tmp/deb
mkdir -p "$deb/pool/$COMPONENT"
cp "$DIST"/*.deb "$deb/pool/$COMPONENT/"
for a in $ARCHES; do
	d=dists/$SUITE/$COMPONENT/binary-$a
	mkdir -p "$deb/$d"
	(cd "$deb" && apt-ftparchive --arch "$a" packages "pool/$COMPONENT" >"$d/Packages")
	gzip -9n <"$deb/$d/Packages" >"$deb/$d/Packages.gz"
done
(cd "$deb" && apt-ftparchive \
	-o APT::FTPArchive::Release::Origin=yunion-mps-daemon \
	-o APT::FTPArchive::Release::Label=yunion-mps-daemon \
	-o APT::FTPArchive::Release::Suite=$SUITE \
	-o APT::FTPArchive::Release::Codename=$SUITE \
	-o "APT::FTPArchive::Release::Architectures=$ARCHES" \
	-o APT::FTPArchive::Release::Components=$COMPONENT \
	release "dists/$SUITE" >"dists/$SUITE/Release.tmp")
mv "$deb/dists/$SUITE/Release.tmp" "$deb/dists/$SUITE/Release"
sign --clearsign -o "$deb/dists/$SUITE/InRelease" "$deb/dists/$SUITE/Release"
sign --armor --detach-sign -o "$deb/dists/$SUITE/Release.gpg" "$deb/dists/$SUITE/Release"
cat >"$REPO.tmp/yunion-mps.list" <<EOF
deb [signed-by=/etc/apt/keyrings/yunion-mps.asc] $REPO_URL/deb $SUITE $COMPONENT
EOF

# ------------------------------------------------------------------ rpm
rpm=$REPO.tmp/rpm
mkdir -p "$rpm"
set -- "$DIST"/*.rpm
[ -e "$1" ] || { echo "repo.sh: no .rpm in $DIST" >&2; exit 1; }
cp "$@" "$rpm/"
# Every package signed with the repository's key, whatever make package did.
GPG_TTY= rpmsign --addsign --define "__gpg $(command -v gpg)" --define "_gpg_name $fpr" \
	--define "_gpg_path $GNUPGHOME" --define "_gpg_digest_algo sha256" \
	--define "_gpg_sign_cmd_extra_args --pinentry-mode loopback --passphrase-file $passfile" \
	"$rpm"/*.rpm >/dev/null
createrepo_c --quiet --general-compress-type=gz "$rpm"
sign --armor --detach-sign -o "$rpm/repodata/repomd.xml.asc" "$rpm/repodata/repomd.xml"
cat >"$REPO.tmp/yunion-mps.repo" <<EOF
[yunion-mps]
name=yunion-mps-daemon
baseurl=$REPO_URL/rpm
enabled=1
gpgcheck=1
repo_gpgcheck=1
gpgkey=$REPO_URL/yunion-mps.asc
EOF

rm -rf "$REPO"
mv "$REPO.tmp" "$REPO"
echo "repo.sh: $REPO (key $fpr): $(ls "$REPO"/deb/pool/$COMPONENT | wc -l) .deb, $(ls "$REPO"/rpm/*.rpm | wc -l) .rpm"
