#!/usr/bin/env bash
# lint.sh DIST [RPM_PUBKEY]: lintian on DIST/*.deb, rpmlint on DIST/*.rpm.
# Prints both reports whole; fails if either reports an error (warnings are
# printed; docs/packaging.md lists the ones that remain and why). rpmlint
# wants signed packages (no-signature is an error) whose key it knows:
# RPM_PUBKEY, the public key they were signed with, goes into a keyring of
# its own.
#
# Both run as nobody on copies in a scratch directory. rpmlint unpacks a
# package with `rpm2cpio | cpio -id`, and nfpm writes absolute member names
# into the rpm payload (/usr/bin/x, where rpmbuild writes ./usr/bin/x): run as
# root that would write the package's files over the host's own, and either
# way rpmlint would not see them. A cpio wrapper first in PATH adds
# --no-absolute-filenames, so rpmlint unpacks into its own directory and
# checks the files too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dist=${1:?usage: lint.sh DIST [RPM_PUBKEY]}
pubkey=${2:-}

scratch=$(mktemp -d /tmp/mps-lint.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin" "$scratch/pkgs"
cp "$dist"/*.deb "$dist"/*.rpm "$scratch/pkgs/"
cp "$repo/packaging/rpmlintrc" "$scratch/rpmlintrc"
printf '#!/bin/sh\nexec /usr/bin/cpio --no-absolute-filenames --quiet "$@"\n' >"$scratch/bin/cpio"
chmod 0755 "$scratch/bin/cpio"
# rpm's database (the signing key's keyring) lives in the scratch directory.
printf '%%_dbpath %s/rpmdb\n' "$scratch" >"$scratch/.rpmmacros"
mkdir "$scratch/rpmdb"
if [ -n "$pubkey" ]; then
	cp "$pubkey" "$scratch/pubkey.asc"
fi
chmod -R a+rX "$scratch"
chown -R nobody "$scratch/rpmdb"
as_nobody() {
	(cd "$scratch" && runuser -u nobody -- env -i HOME="$scratch" PATH="$scratch/bin:/usr/bin:/bin" LANG=C.UTF-8 "$@")
}

status=0
echo "== lintian $(lintian --version | awk '{print $2}')"
lintian_out=$(as_nobody lintian --pedantic "$scratch"/pkgs/*.deb 2>&1) || true
printf '%s\n' "${lintian_out:-(no findings)}"
if grep -q '^E: ' <<<"$lintian_out"; then
	echo "lint.sh: lintian reports errors" >&2
	status=1
fi

if [ -n "$pubkey" ]; then
	as_nobody rpm --import "$scratch/pubkey.asc"
fi
echo "== rpmlint $(rpmlint --version 2>/dev/null | head -n 1)"
rc=0
rpmlint_out=$(as_nobody rpmlint -r "$scratch/rpmlintrc" "$scratch"/pkgs/*.rpm 2>&1) || rc=$?
printf '%s\n' "$rpmlint_out" | sed -n '/^[^ =]*: [EW]: \|errors,/p'
if [ "$rc" -ne 0 ] || grep -q ': E: ' <<<"$rpmlint_out" || ! grep -q ' 0 errors' <<<"$rpmlint_out"; then
	echo "lint.sh: rpmlint reports errors (exit $rc)" >&2
	status=1
fi
exit "$status"
