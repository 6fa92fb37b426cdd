#!/bin/sh
# package.sh builds the .deb and .rpm of yunion-mps-daemon,
# yunion-mps-inventory and yunion-mps-daemon-kubernetes into $DIST from the
# binaries in $BIN (`make package` runs `make build build-kubernetes` first).
# nfpm is the tools module's (tools/go.mod), so it never enters the main
# module.
#
# Environment (all optional):
#   BIN            binaries (bin)
#   PKG_NAMES      which packages, by their nfpm config packaging/nfpm-NAME.yaml
#                  (daemon inventory kubernetes)
#   DIST           output directory (dist)
#   NFPM           the nfpm command (go tool -modfile=tools/go.mod nfpm)
#   PKG_VERSION    package version (packaging/version.sh: from git describe)
#   PKG_ARCH       Go architecture name (go env GOARCH); nfpm maps it per format
#   PKG_MAINTAINER Name <mail> of whoever publishes the packages; the default
#                  is a placeholder (example.org) to replace for releases
#   PKG_RPM_KEY_FILE  armored private key to sign the rpms with (passphrase in
#                  NFPM_RPM_PASSPHRASE); empty: unsigned
set -eu
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=${BIN:-bin}
DIST=${DIST:-dist}
NFPM=${NFPM:-$GO tool -modfile=tools/go.mod nfpm}
PKG_VERSION=${PKG_VERSION:-$(packaging/version.sh)}
PKG_ARCH=${PKG_ARCH:-$($GO env GOARCH)}
PKG_MAINTAINER=${PKG_MAINTAINER:-yunion-mps-daemon packagers <mps-daemon@example.org>}

PKG_NAMES=${PKG_NAMES:-daemon inventory kubernetes}

# binaries NAME prints the binaries the package NAME ships.
binaries() {
	case $1 in
	daemon) echo mps-daemon mpsctl ;;
	inventory) echo mps-inventory ;;
	kubernetes) echo mps-daemon-kubernetes ;;
	*)
		echo "package.sh: unknown package $1 (PKG_NAMES)" >&2
		exit 1
		;;
	esac
}
for name in $PKG_NAMES; do
	binaries "$name" >/dev/null
	for b in $(binaries "$name"); do
		[ -x "$BIN/$b" ] || { echo "package.sh: $BIN/$b missing: run make build build-kubernetes" >&2; exit 1; }
	done
	# The daemon package ships the view's library too (make tenant).
	if [ "$name" = daemon ] && [ ! -f "$BIN/libyunion-mps-view.so" ]; then
		echo "package.sh: $BIN/libyunion-mps-view.so missing: run make tenant" >&2
		exit 1
	fi
done

# glibc_min BINARY: mps-daemon and mps-daemon-kubernetes are the cgo
# binaries: each needs the newest glibc symbol version it references, which
# becomes its package's libc6/glibc dependency.
glibc_min() {
	v=$(objdump -T "$BIN/$1" | sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -uV | tail -n 1)
	[ -n "$v" ] || { echo "package.sh: no GLIBC_ symbol version in $BIN/$1" >&2; exit 1; }
	echo "$v"
}

# Generated inputs; the nfpm configs name dist/.stage/changelog.yml (nfpm
# does not expand variables in that field), so the stage is always here.
STAGE=dist/.stage
trap 'rm -rf "$STAGE"' EXIT
rm -rf "$STAGE"
mkdir -p "$STAGE"

# changelog.yml (chglog's format): one entry for this build, dated by its
# commit, so that the same commit gives the same bytes. nfpm renders it as
# changelog.Debian.gz and as the rpm %changelog.
cat >"$STAGE/changelog.yml" <<CHANGELOG
- semver: "$PKG_VERSION-1"
  date: $(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
  packager: "$PKG_MAINTAINER"
  deb:
    urgency: medium
    distributions: [unstable]
  changes:
    - commit: $(git rev-parse HEAD)
      note: "Built from git $(git describe --tags --always --dirty)."
CHANGELOG

# copyright: the project's notice, then the license of every module linked
# into the package's binaries (Go binaries are static: the licenses ship with
# them) and of the Go standard library. copyright.full has every text (the
# rpm's %license); copyright.deb points at Debian's copy of Apache-2.0
# instead of repeating it, as Debian policy asks.
copyright() {
	pkg=$1
	shift
	mkdir -p "$STAGE/$pkg"
	full=$STAGE/$pkg/copyright.full deb=$STAGE/$pkg/copyright.deb
	cp packaging/files/copyright "$full"
	cp packaging/files/copyright "$deb"
	license_text() {
		# $1 heading, $2 file
		printf '\n\n%s\n\n' "$1" | tee -a "$deb" >>"$full"
		cat "$2" >>"$full"
		if grep -q 'Apache License' "$2" && grep -q 'Version 2.0, January 2004' "$2"; then
			printf 'Apache License, Version 2.0: on Debian systems the full text is in\n/usr/share/common-licenses/Apache-2.0.\n' >>"$deb"
		else
			cat "$2" >>"$deb"
		fi
	}
	license_text "Go standard library ($($GO env GOVERSION))" "$($GO env GOROOT)/LICENSE"
	$GO list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}} {{.Dir}}{{end}}{{end}}' "$@" |
		sort -u >"$STAGE/$pkg/modules"
	while read -r path version dir; do
		found=
		for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE*; do
			[ -f "$f" ] || continue
			found=1
			license_text "$path $version ($(basename "$f"))" "$f"
		done
		if [ -z "$found" ]; then
			echo "package.sh: $path $version has no license file" >&2
			exit 1
		fi
	done <"$STAGE/$pkg/modules"
}
PKG_RPM_KEY_FILE=${PKG_RPM_KEY_FILE:-}
export PKG_VERSION PKG_ARCH PKG_MAINTAINER BIN STAGE PKG_RPM_KEY_FILE
mkdir -p "$DIST"
for name in $PKG_NAMES; do
	# GLIBC_MIN: the libc6/glibc dependency of the packages with a cgo binary.
	GLIBC_MIN=
	case $name in
	daemon)
		copyright yunion-mps-daemon ./cmd/mps-daemon ./cmd/mpsctl
		GLIBC_MIN=$(glibc_min mps-daemon)
		;;
	inventory) copyright yunion-mps-inventory ./cmd/mps-inventory ;;
	kubernetes)
		copyright yunion-mps-daemon-kubernetes -tags netgo,osusergo,kubernetes ./cmd/mps-daemon
		GLIBC_MIN=$(glibc_min mps-daemon-kubernetes)
		;;
	esac
	export GLIBC_MIN
	for fmt in deb rpm; do
		$NFPM package --config "packaging/nfpm-$name.yaml" --packager "$fmt" --target "$DIST/"
	done
	echo "package.sh: $name, version $PKG_VERSION${GLIBC_MIN:+, glibc >= $GLIBC_MIN}"
done
