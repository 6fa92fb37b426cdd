#!/usr/bin/env bash
# tenant/test/bench.sh LIB: what the view library costs a process that
# never touches CUDA (start of /bin/true, 200 runs, and of python3, 50) and
# a dlsym call (dlsymbench), with and without LIB preloaded, alternated.
# A measurement for docs/benchmarks.md, not a test.
set -euo pipefail
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cc=${CC:-gcc}
$cc -O2 -fPIC -shared -fno-ipa-icf -o "$W/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$here/fakecuda.c" -lpthread
$cc -O2 -o "$W/dlsymbench" "$here/dlsymbench.c" -ldl -Wl,-rpath,"$W"
starts() { # starts N CMD...: mean milliseconds to run CMD
	local n=$1 t0 t1
	shift
	t0=$(date +%s%N)
	for _ in $(seq "$n"); do "$@" >/dev/null; done
	t1=$(date +%s%N)
	echo "scale=3; ($t1 - $t0) / $n / 1000000" | bc
}
for round in 1 2 3; do
	for with in no yes; do
		pre=(env)
		[ $with = yes ] && pre=(env LD_PRELOAD="$lib")
		echo "round $round, preloaded: $with"
		echo "  /bin/true: $(starts 200 "${pre[@]}" /bin/true) ms"
		echo "  python3 -c pass: $(starts 50 "${pre[@]}" /usr/bin/python3 -c pass) ms"
		"${pre[@]}" "$W/dlsymbench" | sed 's/^/  dlsym ns, /'
	done
done
