#!/bin/sh
# version.sh prints the package version for the checkout: `git describe`
# mapped onto a version that dpkg and rpm both order by release and, between
# releases, by commit time.
#
#   v1.2.3                        -> 1.2.3
#   v1.2.3-rc.1                   -> 1.2.3~rc.1            (~ sorts before 1.2.3)
#   v1.2.3-4-gabc1234             -> 1.2.3+git20261122022755.abc1234
#   abc1234 (no tag yet)          -> 0.0.0~git20261122022755.abc1234
#   any of these with -dirty      -> the same with .dirty appended
#
# The timestamp is the commit's (UTC), so later commits give higher versions
# whatever their hashes. A dirty tree gets the same version as its commit
# plus ".dirty": build release packages from clean checkouts.
#
# Usage: version.sh [DESCRIBE COMMIT_TIME]; without arguments both come from
# git (`git describe --tags --always --dirty`, the commit time of HEAD).
set -eu

if [ $# -ge 2 ]; then
	describe=$1 when=$2
else
	describe=$(git describe --tags --always --dirty)
	when=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
fi

dirty=
case $describe in
*-dirty) dirty=.dirty describe=${describe%-dirty} ;;
esac

case $describe in
v[0-9]*-[0-9]*-g[0-9a-f]*)
	# <tag>-<commits since>-g<sha>: after the tag, before the next one.
	sha=${describe##*-g}
	rest=${describe%-g*}
	tag=${rest%-*}
	suffix=+git$when.$sha
	;;
v[0-9]*)
	tag=$describe suffix=
	;;
*)
	# No tag reachable: an abbreviated hash. Before any release.
	case $describe in
	*[!0-9a-f]* | "")
		echo "version.sh: cannot map \"$describe\" to a version (want vX.Y.Z tags)" >&2
		exit 1
		;;
	esac
	echo "0.0.0~git$when.$describe$dirty"
	exit 0
	;;
esac

tag=${tag#v}
# A semver pre-release (v1.2.3-rc.1) sorts before its release with ~.
case $tag in
*-*) tag=$(printf '%s' "$tag" | sed 's/-/~/') ;;
esac
case $tag in
*[!0-9A-Za-z.~+]*)
	echo "version.sh: tag v$tag holds characters a package version cannot" >&2
	exit 1
	;;
esac
echo "$tag$suffix$dirty"
