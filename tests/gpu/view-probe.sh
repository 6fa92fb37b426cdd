#!/usr/bin/env bash
# The view library (tenant/, issue 38) against the real driver, in one call:
# builds libyunion-mps-view.so there with gcc (make tenant), starts an MPS
# control daemon of its own (pinned memory limit 1/4 of the card, the cap),
# stages the view file a container would have and preloads the library
# through a private mount namespace's /etc/ld.so.preload (unshare -m, bind
# mounts; the host's files stay as they were). Reports what PyTorch, vLLM's
# start rule, JAX, CuPy, nvidia-smi and NVML see without and with it, a
# process that clears its environment, the CUDA runtime's lookups (a traced
# build), and small-kernel throughput with and without it, alternated.
#   device run: bash tests/gpu/view-probe.sh    (no carry; timeout 240 s)
# Output: $OUT/view-probe.txt (kept as docs/gpu-runs/view-probe-<date>.txt),
# $OUT/trace.txt. Never changes the card's settings.
set -uo pipefail
OUT=${OUT:-/tmp/view-probe-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
R=$OUT/view-probe.txt
W=$(mktemp -d /tmp/vp.XXXX); chmod 755 "$W"
PY=$(command -v python3)
P="$PY $HERE/view_probe.py"
FAIL=0
T0=$(date +%s)
: >"$R"
say() { echo "$*" | tee -a "$R"; }
check() { if [ "$2" = 0 ]; then say "- PASS: $1 ${3:-}"; else say "- FAIL: $1 ${3:-}"; FAIL=1; fi; }
val() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }   # val KEY FILE
mib() { echo $(( ${1:-0} / 1048576 )); }
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }

say "# The view library against the real driver: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv | tee -a "$R"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
TOTAL_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
CAP_MIB=$((TOTAL_MIB / 4)); CAP=$((CAP_MIB * 1048576))
say "cap (MPS pinned limit, view total_bytes): $CAP_MIB MiB = $CAP bytes; $(uname -r); $(ldd --version | head -1)"

say
say "## Build (make tenant with the machine's gcc)"
(cd "$REPO" && make -s tenant ARCH=amd64 CC_amd64=gcc BIN="$W/lib" BUILD="$W/build") >"$W/build.log" 2>&1
check "make tenant ARCH=amd64 CC_amd64=gcc" $? "$(tail -3 "$W/build.log" | tr '\n' ' ')"
STUBS=$(ls -d "$W"/build/glibc-2.17-amd64-* | head -1)
"$REPO/tenant/build.sh" gcc "$STUBS" "$W/trace/libyunion-mps-view.so" -DVIEW_TRACE >>"$W/build.log" 2>&1
check "the traced build (-DVIEW_TRACE)" $?
newest=$(objdump -T "$W/lib/libyunion-mps-view.so" | grep -F '*UND*' | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
say "needs at most $newest (objdump -T)"

say
say "## The real libraries' exports of the names we stand in for"
LC=$(ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF; exit }')
LN=$(ldconfig -p | awk '$1 == "libnvidia-ml.so.1" { print $NF; exit }')
say "libcuda.so.1 -> $(readlink -f "$LC"); libnvidia-ml.so.1 -> $(readlink -f "$LN")"
objdump -T "$LC" "$LN" | grep -E ' (cuMemGetInfo|cuDeviceTotalMem|cuGetProcAddress|cuDeviceGetUuid|cuCtxGetDevice|nvmlDeviceGetMemoryInfo|nvmlDeviceGetUUID)(_v[0-9])?$' | tee -a "$R"

# MPS: one control daemon for the GPU, default pinned limit = the cap.
PIPE=$W/pipe LOGD=$W/log
mkdir -p "$PIPE" "$LOGD"; chmod 755 "$PIPE" "$LOGD"
export CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOGD CUDA_VISIBLE_DEVICES=$UUID
nvidia-cuda-mps-control -d
ctl() { echo "$*" | timeout 10 nvidia-cuda-mps-control 2>&1; }
ctl set_default_device_pinned_mem_limit 0 "${CAP_MIB}M" >/dev/null
say "MPS: $(ctl get_default_device_pinned_mem_limit 0)"
cleanup() {
	for p in $(jobs -p); do kill "$p" 2>/dev/null; done
	ctl quit >/dev/null 2>&1
	[ -n "${CREATED_PRELOAD:-}" ] && rm -f /etc/ld.so.preload
	cp "$LOGD"/*.log "$OUT/" 2>/dev/null
}
trap cleanup EXIT

# What a container of the device has: /run/yunion-mps/{lib,view/<UUID>/memory}
# and /etc/ld.so.preload naming the library. RUN_DIR's lib is swapped for
# the traced build in trace runs.
stage() { # stage DIR LIB
	mkdir -p "$1/lib" "$1/view/$UUID"
	cp "$2" "$1/lib/libyunion-mps-view.so"
	printf 'total_bytes %s\nused_bytes 0\n' "$CAP" >"$1/view/$UUID/memory"
}
stage "$W/run" "$W/lib/libyunion-mps-view.so"
stage "$W/run-trace" "$W/trace/libyunion-mps-view.so"
echo /run/yunion-mps/lib/libyunion-mps-view.so >"$W/ld.so.preload"
mkdir -p /run/yunion-mps
[ -e /etc/ld.so.preload ] || { : >/etc/ld.so.preload; CREATED_PRELOAD=1; }
HOW="/etc/ld.so.preload in a private mount namespace"
if ! unshare -m --propagation private true 2>/dev/null; then
	HOW="LD_PRELOAD (unshare -m refused here)"
fi
# inview [-t] CMD...: CMD as in a container with the view (-t: traced build).
inview() {
	local run=$W/run
	[ "$1" = -t ] && { run=$W/run-trace; shift; }
	if [ "$HOW" = "${HOW#LD_PRELOAD}" ]; then
		unshare -m --propagation private sh -c 'mount --bind "$1" /run/yunion-mps && mount --bind "$2" /etc/ld.so.preload && shift 2 && exec "$@"' \
			sh "$run" "$W/ld.so.preload" "$@"
	else
		rm -rf /run/yunion-mps/*; cp -r "$run"/* /run/yunion-mps/
		LD_PRELOAD=/run/yunion-mps/lib/libyunion-mps-view.so "$@"
	fi
}
say "the library comes in through: $HOW"

say
say "## Without the library (an MPS client of the cap, as today)"
$P torch >"$W/t0" 2>"$W/t0.err"; cat "$W/t0" | tee -a "$R"
say "(torch: total $(mib "$(val torch.total "$W/t0")") MiB, free $(mib "$(val torch.free "$W/t0")") MiB)"
$P jax >"$W/j0" 2>"$W/j0.err"; cat "$W/j0" | tee -a "$R"
say "[$(elapsed)]"

say
say "## With the library"
inview $P torch >"$W/t1" 2>"$W/t1.err"; cat "$W/t1" | tee -a "$R"; tail -3 "$W/t1.err" | sed 's/^/stderr: /' | tee -a "$R"
check "torch.cuda.mem_get_info total = cap" "$([ "$(val torch.total "$W/t1")" = "$CAP" ]; echo $?)" "($(mib "$(val torch.total "$W/t1")") MiB)"
check "torch.cuda.mem_get_info free <= cap" "$([ "$(val torch.free "$W/t1")" -le "$CAP" ] 2>/dev/null; echo $?)" "($(mib "$(val torch.free "$W/t1")") MiB)"
check "get_device_properties(0).total_memory = cap" "$([ "$(val torch.total_memory "$W/t1")" = "$CAP" ]; echo $?)" "($(mib "$(val torch.total_memory "$W/t1")") MiB)"
check "vLLM's start rule (free >= 0.9 x total) passes" "$([ "$(val vllm.rule "$W/t1")" = 1 ]; echo $?)"
check "vLLM's share (0.9 x total less what is used) allocates and a matmul runs" "$([ "$(val vllm.alloc "$W/t1")" = 1 ]; echo $?)"
check "/proc/PID/maps names libyunion-mps-view.so" "$([ "$(val maps.view "$W/t1")" = 1 ]; echo $?)"
inview nvidia-smi -i "$UUID" --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits >"$W/smi" 2>&1
say "nvidia-smi inside: $(cat "$W/smi") (MiB: total, used, free)"
check "nvidia-smi memory.total = cap" "$([ "$(cut -d, -f1 "$W/smi" | tr -d ' ')" = "$CAP_MIB" ]; echo $?)"
inview $P nvml >"$W/n1" 2>&1; cat "$W/n1" | tee -a "$R"
check "NVML memory info total = cap" "$([ "$(val nvml.total "$W/n1")" = "$CAP" ]; echo $?)"
inview $P cupy >"$W/c1" 2>&1; cat "$W/c1" | tee -a "$R"
check "CuPy memGetInfo total = cap" "$([ "$(val cupy.total "$W/c1")" = "$CAP" ]; echo $?)"
check "CuPy totalGlobalMem = cap" "$([ "$(val cupy.totalGlobalMem "$W/c1")" = "$CAP" ]; echo $?)"
inview env -i "$PY" "$HERE/view_probe.py" torch >"$W/e1" 2>&1; cat "$W/e1" | sed 's/^/env -i: /' | tee -a "$R"
check "a process started with env -i (no MPS variables: the whole GPU) sees total = cap" "$([ "$(val torch.total "$W/e1")" = "$CAP" ]; echo $?)"
inview $P jax >"$W/j1" 2>"$W/j1.err"; cat "$W/j1" | tee -a "$R"
check "JAX's default preallocation (0.75 x total) succeeds" "$([ "$(val jax.ok "$W/j1")" = 1 ]; echo $?)" "(bytes_limit $(mib "$(val jax.bytes_limit "$W/j1")") MiB of cap $CAP_MIB)"
say "[$(elapsed)]"

say
say "## The CUDA runtime's lookups (traced build, torch): $OUT/trace.txt"
inview -t $P torch >"$W/tt" 2>"$OUT/trace.txt"
cat "$W/tt" | sed 's/^/traced: /' | tee -a "$R"
grep '^view: ' "$OUT/trace.txt" | grep -vE '^view: cuGetProcAddress [^:]' | sort | uniq -c | sort -rn | head -30 | tee -a "$R"
say "cuGetProcAddress lookups: $(grep -cE '^view: cuGetProcAddress [^:]' "$OUT/trace.txt"); of memory names: $(grep -E '^view: cuGetProcAddress (cuMemGetInfo|cuDeviceTotalMem|cuGetProcAddress) ' "$OUT/trace.txt" | sort | uniq -c | tr '\n' ';')"
say "[$(elapsed)]"

say
say "## Small-kernel throughput, with and without, alternated (ABBA), one MPS client each"
B=$W/bench; mkdir -p "$B"; ROUNDS=4 SECS=5
$P bench without "$B" $ROUNDS $SECS 2>"$B/without.err" &
inview $P bench with "$B" $ROUNDS $SECS 2>"$B/with.err" &
for _ in $(seq 600); do [ -e "$B/ready.without" ] && [ -e "$B/ready.with" ] && break; sleep 0.1; done
for r in $(seq 0 $((ROUNDS - 1))); do
	if [ $((r % 2)) = 0 ]; then order="without with"; else order="with without"; fi
	for role in $order; do
		touch "$B/go.$role.$r"
		for _ in $(seq 600); do [ -e "$B/$role.$r" ] && break; sleep 0.05; done
	done
done
wait
wo=$(for r in $(seq 0 $((ROUNDS - 1))); do cat "$B/without.$r" 2>/dev/null; done | tr '\n' ' ')
wi=$(for r in $(seq 0 $((ROUNDS - 1))); do cat "$B/with.$r" 2>/dev/null; done | tr '\n' ' ')
say "steps/s without: $wo"
say "steps/s with:    $wi"
ratio=$(python3 -c 'import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print(f"{(sum(b)/len(b))/(sum(a)/len(a)):.4f}" if a and b else "nan")' "$wo" "$wi")
check "throughput with / without >= 0.99" "$(python3 -c 'import sys; sys.exit(0 if sys.argv[1] != "nan" and float(sys.argv[1]) >= 0.99 else 1)' "$ratio"; echo $?)" "(mean ratio $ratio)"
tail -2 "$B/with.err" "$B/without.err" 2>/dev/null | tee -a "$R" >/dev/null
say
say "done in $(elapsed); $([ $FAIL = 0 ] && echo 'all PASS' || echo 'FAILURES above')"
