#!/usr/bin/env bash
# tenant/test/bench.sh LIB [ROUNDS]: what the view library costs a process
# that never touches CUDA, and a dlsym call. A measurement for
# docs/benchmarks.md ("The view library's cost"), not a test.
#
# Start cost: startbench (startbench.c) starts /bin/true, `bash -c :` and
# `python3 -c pass` in rounds of two blocks, one without LIB and one with
# it, in ABBA order, and reports the started processes' own CPU time
# (user + system, from wait4) per start: the median of each side, the
# median of the rounds' ratios with its 95% confidence interval. Twice:
# with LD_PRELOAD=LIB, and with /etc/ld.so.preload naming LIB against no
# /etc/ld.so.preload at all (a container with and without the view), in a
# mount namespace of its own whose /etc is an overlay (root, or user
# namespaces). Then dlsymbench: nanoseconds per dlsym call with and without.
set -euo pipefail
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
rounds=${2:-40}
here=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cc=${CC:-gcc}
$cc -O2 -Wall -o "$W/startbench" "$here/startbench.c" -lm
$cc -O2 -fPIC -shared -fno-ipa-icf -o "$W/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$here/fakecuda.c" -lpthread
$cc -O2 -o "$W/dlsymbench" "$here/dlsymbench.c" -ldl -Wl,-rpath,"$W"

echo "machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg); $(ldd --version | head -1)"
echo "library: $lib ($(stat -c %s "$lib") bytes, $(readelf -lW "$lib" | grep -c ' LOAD ') LOAD segments, needs: $(readelf -dW "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '))"
# The interpreter itself, not a wrapper script (pyenv's shims are bash).
py=$(python3 -c 'import sys; print(sys.executable)')
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
cmds=("/bin/true" "$(command -v bash) -c :" "$py -c pass")
starts=(200 100 10)
echo "== LD_PRELOAD"
for i in "${!cmds[@]}"; do
	# shellcheck disable=SC2086
	echo "${cmds[i]}: $("$W/startbench" -m env -n "${starts[i]}" -r "$rounds" "$lib" -- ${cmds[i]} | head -1)"
done
echo "== /etc/ld.so.preload (a mount namespace with an overlay on /etc)"
if [ "$(id -u)" = 0 ]; then ns=(unshare -m --propagation private); else ns=(unshare -r -m --propagation private); fi
for i in "${!cmds[@]}"; do
	# shellcheck disable=SC2016,SC2086
	"${ns[@]}" sh -c '
		set -e
		mkdir -p "$1/upper" "$1/work"
		mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
		rm -f /etc/ld.so.preload
		shift
		exec "$@"' sh "$W/etc$i" sh -c 'echo "$0: $("$@" | head -1)"' "${cmds[i]}" \
		"$W/startbench" -m file -n "${starts[i]}" -r "$rounds" "$lib" -- ${cmds[i]}
done
echo "== dlsym, ns per call"
for with in no yes; do
	pre=(env)
	[ $with = yes ] && pre=(env LD_PRELOAD="$lib")
	"${pre[@]}" "$W/dlsymbench" | sed "s/^/  preloaded: $with, /"
done
