#!/usr/bin/env bash
# version_test.sh: packaging/version.sh maps `git describe` onto versions
# that dpkg and rpm both accept and order as the commits are ordered.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
v=$here/../../packaging/version.sh
when=20261122022755
status=0

# describe -> version
while read -r describe want; do
	got=$("$v" "$describe" "$when")
	if [ "$got" != "$want" ]; then
		echo "version.sh $describe: got $got, want $want" >&2
		status=1
	fi
done <<TABLE
abc1234                    0.0.0~git$when.abc1234
abc1234-dirty              0.0.0~git$when.abc1234.dirty
v1.2.3                     1.2.3
v1.2.3-dirty               1.2.3.dirty
v1.2.3-rc.1                1.2.3~rc.1
v1.2.3-4-gabc1234          1.2.3+git$when.abc1234
v1.2.3-4-gabc1234-dirty    1.2.3+git$when.abc1234.dirty
v1.0.0-rc.1-2-gdeadbee     1.0.0~rc.1+git$when.deadbee
TABLE

# Refused: what cannot become a version.
for describe in "" "release-1" "v1.2.3_x"; do
	if "$v" "$describe" "$when" >/dev/null 2>&1; then
		echo "version.sh \"$describe\": accepted, want an error" >&2
		status=1
	fi
done

# Each version sorts before the next, for dpkg and for rpm.
ordered=(
	"0.0.0~git20261122022755.abc1234"
	"0.0.0~git20261123000000.0123456" # a later commit, whatever its hash
	"0.0.0~git20261123000000.0123456.dirty"
	"1.0.0~rc.1"
	"1.0.0~rc.1+git20261124000000.deadbee"
	"1.0.0"
	"1.0.0+git20261125000000.abc1234"
	"1.0.1"
)
for ((i = 0; i + 1 < ${#ordered[@]}; i++)); do
	a=${ordered[i]} b=${ordered[i + 1]}
	if ! dpkg --compare-versions "$a-1" lt "$b-1"; then
		echo "dpkg: $a-1 does not sort before $b-1" >&2
		status=1
	fi
	if command -v rpm >/dev/null; then
		c=$(rpm --eval "%{lua: print(rpm.vercmp(\"$a-1\", \"$b-1\"))}")
		if [ "$c" != -1 ]; then
			echo "rpm: $a-1 does not sort before $b-1 ($c)" >&2
			status=1
		fi
	fi
done
[ "$status" = 0 ] && echo "   ok: version.sh maps and orders ${#ordered[@]} versions for dpkg and rpm"
exit "$status"
