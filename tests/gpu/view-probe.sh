#!/usr/bin/env bash
# The view library (tenant/, issue 38) against the real driver, in one call:
# builds libyunion-mps-view.so there with gcc (make tenant), starts an MPS
# control daemon of its own (pinned memory limit 1/4 of the card: the cap),
# stages the view file a container would have and preloads the library
# through a private mount namespace's /etc/ld.so.preload (unshare -m and bind
# mounts; LD_PRELOAD where the machine refuses them, and the report says
# so). Reports what PyTorch, vLLM's start rule, JAX, CuPy, nvidia-smi and
# NVML see without and with it, a process that clears its environment, the
# CUDA runtime's lookups (a traced build) and small-kernel throughput with
# and without it, alternated ABBA in short rounds.
#   device run: bash tests/gpu/view-probe.sh    (timeout 240 s)
# Output: $OUT/view-probe.txt (kept as docs/gpu-runs/view-probe-<date>.txt),
# $OUT/trace*.txt. Never changes the card's settings.
set -uo pipefail
OUT=${OUT:-/tmp/view-probe-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
R=$OUT/view-probe.txt
W=$(mktemp -d /tmp/vp.XXXX); chmod 755 "$W"
PY=$(command -v python3)
P="timeout 90 $PY $HERE/view_probe.py"
FAIL=0
T0=$(date +%s)
: >"$R"
say() { echo "$*" | tee -a "$R"; }
show() { tee -a "$R"; }
check() { if [ "$2" = 0 ]; then say "- PASS: $1 ${3:-}"; else say "- FAIL: $1 ${3:-}"; FAIL=1; fi; }
val() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }   # val KEY FILE
is() { [ "$(val "$1" "$2")" = "$3" ]; echo $?; }              # is KEY FILE VALUE: 0 when equal
mib() { echo $(( ${1:-0} / 1048576 )); }
elapsed() { echo $(( $(date +%s) - T0 )); }

say "# The view library against the real driver: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv | show
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
TOTAL_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
CAP_MIB=$((TOTAL_MIB / 4)); CAP=$((CAP_MIB * 1048576))
say "cap (MPS pinned limit, view total_bytes): $CAP_MIB MiB = $CAP bytes; kernel $(uname -r); $(ldd --version | head -1); $($PY --version)"

say
say "## Build (make tenant with the machine's gcc)"
(cd "$REPO" && make -s tenant ARCH=amd64 CC_amd64=gcc BIN="$W/lib") >"$W/build.log" 2>&1
check "make tenant ARCH=amd64 CC_amd64=gcc" $? "$(tail -3 "$W/build.log" | tr '\n' ' ')"
# The stubs make tenant made (BUILD is relative to the checkout).
STUBS=$(ls -d "$REPO"/.build/glibc-2.17-amd64-* | head -1)
"$REPO/tenant/build.sh" gcc "$STUBS" "$W/trace/libyunion-mps-view.so" -DVIEW_TRACE >>"$W/build.log" 2>&1
check "the traced build (-DVIEW_TRACE)" $?
say "the library needs at most $(objdump -T "$W/lib/libyunion-mps-view.so" | grep -F '*UND*' | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1) (objdump -T)"

say
say "## The real libraries: where, and their exports of the names we stand in for"
$PY -c 'import ctypes
ctypes.CDLL("libcuda.so.1"); ctypes.CDLL("libnvidia-ml.so.1")
for l in open("/proc/self/maps"):
    p = l.split()[-1]
    if "libcuda.so" in p or "libnvidia-ml.so" in p: print(p)' | sort -u >"$W/libs"
show <"$W/libs"
LC=$(grep -m1 libcuda "$W/libs"); LN=$(grep -m1 libnvidia-ml "$W/libs")
objdump -T "$LC" "$LN" | grep -E ' (cuMemGetInfo|cuDeviceTotalMem|cuGetProcAddress|cuDeviceGetUuid|cuCtxGetDevice|nvmlDeviceGetMemoryInfo|nvmlDeviceGetUUID)(_v[0-9])?$' | show
INCACHE=$(ldconfig -p | grep -c 'libcuda.so.1 ')
say "libcuda.so.1 in ld.so.cache: $INCACHE; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# MPS: one control daemon for the GPU, default pinned limit = the cap.
PIPE=$W/pipe LOGD=$W/log
mkdir -p "$PIPE" "$LOGD"; chmod 755 "$PIPE" "$LOGD"
export CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOGD CUDA_VISIBLE_DEVICES=$UUID
nvidia-cuda-mps-control -d
ctl() { echo "$*" | timeout 10 nvidia-cuda-mps-control 2>&1; }
ctl set_default_device_pinned_mem_limit 0 "${CAP_MIB}M" >/dev/null
say "MPS default pinned limit of device 0: $(ctl get_default_device_pinned_mem_limit 0)"
BENCH_PIDS=()
cleanup() {
	for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
	ctl quit >/dev/null 2>&1
	[ -n "${CREATED_PRELOAD:-}" ] && rm -f /etc/ld.so.preload
	cp "$LOGD/server.log" "$OUT/mps-server.log" 2>/dev/null
}
trap cleanup EXIT

# What a container of the device has: /run/yunion-mps/{lib,view/<UUID>/memory}
# and /etc/ld.so.preload naming the library; run-trace has the traced build.
stage() { # stage DIR LIB
	mkdir -p "$1/lib" "$1/view/$UUID"
	cp "$2" "$1/lib/libyunion-mps-view.so"
	printf 'total_bytes %s\nused_bytes 0\n' "$CAP" >"$1/view/$UUID/memory"
}
stage "$W/run" "$W/lib/libyunion-mps-view.so"
stage "$W/run-trace" "$W/trace/libyunion-mps-view.so"
echo /run/yunion-mps/lib/libyunion-mps-view.so >"$W/ld.so.preload"
mkdir -p /run/yunion-mps
[ -e /etc/ld.so.preload ] || { : >/etc/ld.so.preload && CREATED_PRELOAD=1; }
nsrun() { # nsrun RUNDIR CMD...: CMD with RUNDIR on /run/yunion-mps and our ld.so.preload
	local run=$1
	shift
	unshare -m --propagation private sh -c 'mount --bind "$1" /run/yunion-mps && mount --bind "$2" /etc/ld.so.preload && shift 2 && exec "$@"' \
		sh "$run" "$W/ld.so.preload" "$@"
}
if [ "$(nsrun "$W/run" cat /etc/ld.so.preload 2>&1)" = /run/yunion-mps/lib/libyunion-mps-view.so ] &&
	nsrun "$W/run" grep -q libyunion-mps-view.so /proc/self/maps 2>/dev/null; then
	HOW=ns
	say "the library comes in through /etc/ld.so.preload (bind-mounted in a private mount namespace)"
else
	HOW=env
	say "the library comes in through LD_PRELOAD: unshare -m / mount --bind refused here ($(nsrun "$W/run" true 2>&1 | head -1))"
fi
inview() { # inview [-t] CMD...: CMD as in a container with the view (-t: the traced build)
	local run=$W/run
	[ "$1" = -t ] && { run=$W/run-trace; shift; }
	if [ $HOW = ns ]; then nsrun "$run" "$@"; else
		rm -rf /run/yunion-mps/*; cp -r "$run"/* /run/yunion-mps/
		LD_PRELOAD=/run/yunion-mps/lib/libyunion-mps-view.so "$@"
	fi
}

say
say "## Without the library (an MPS client held to the cap, as today)"
$P torch >"$W/t0" 2>"$W/t0.err"; show <"$W/t0"
say "[$(elapsed) s]"

say
say "## With the library"
inview $P torch >"$W/t1" 2>"$W/t1.err"; show <"$W/t1"; tail -2 "$W/t1.err" | sed 's/^/stderr: /' | show
check "torch.cuda.mem_get_info total = cap" "$(is torch.total "$W/t1" "$CAP")" "($(mib "$(val torch.total "$W/t1")") MiB)"
check "torch.cuda.mem_get_info free <= cap" "$([ "$(val torch.free "$W/t1")" -le "$CAP" ] 2>/dev/null; echo $?)" "($(mib "$(val torch.free "$W/t1")") MiB)"
check "get_device_properties(0).total_memory = cap" "$(is torch.total_memory "$W/t1" "$CAP")" "($(mib "$(val torch.total_memory "$W/t1")") MiB)"
check "driver API through ctypes: cuDeviceTotalMem_v2, cuMemGetInfo_v2 total = cap" "$([ "$(val driver.totalmem "$W/t1")" = "$CAP" ] && [ "$(val driver.total "$W/t1")" = "$CAP" ]; echo $?)"
check "vLLM's start rule (free >= 0.9 x total) passes" "$(is vllm.rule "$W/t1" 1)"
check "vLLM's share (0.9 x total less what is used) allocates and a matmul runs" "$(is vllm.alloc "$W/t1" 1)"
check "/proc/PID/maps names libyunion-mps-view.so" "$(is maps.view "$W/t1" 1)"
CUDART=$(val maps.cudart "$W/t1")
[ -f "$CUDART" ] && say "the CUDA runtime PyTorch loaded: $CUDART; its dynamic imports of dl*: $(objdump -T "$CUDART" | grep -oE ' (dlsym|dlvsym|dlopen|dlmopen)$' | sort -u | tr -d ' ' | tr '\n' ' ')"
inview timeout 30 nvidia-smi -i "$UUID" --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits >"$W/smi" 2>&1
say "nvidia-smi inside (MiB: total, used, free): $(cat "$W/smi")"
check "nvidia-smi memory.total = cap" "$([ "$(cut -d, -f1 "$W/smi" | tr -d ' ')" = "$CAP_MIB" ]; echo $?)"
if [ "$(cut -d, -f1 "$W/smi" | tr -d ' ')" != "$CAP_MIB" ]; then
	inview -t timeout 30 nvidia-smi -i "$UUID" --query-gpu=memory.total --format=csv,noheader >/dev/null 2>"$OUT/trace-smi.txt"
	say "nvidia-smi traced: $(sort "$OUT/trace-smi.txt" | uniq -c | head -12 | tr '\n' ';')"
fi
inview $P nvml >"$W/n1" 2>&1; show <"$W/n1"
check "NVML memory info total = cap" "$(is nvml.total "$W/n1" "$CAP")"
inview $P cupy >"$W/c1" 2>&1; show <"$W/c1"
check "CuPy memGetInfo total = cap" "$(is cupy.total "$W/c1" "$CAP")"
check "CuPy totalGlobalMem = cap" "$(is cupy.totalGlobalMem "$W/c1" "$CAP")"
# env -i: no MPS variables (the whole GPU, no MPS), no LD_PRELOAD; the
# machine's NVLink-multicast switches kept; LD_LIBRARY_PATH only where the
# driver is not in ld.so.cache (then a container would not find it either).
EENV=(NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)
[ "$INCACHE" = 0 ] && EENV+=("LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
inview env -i "${EENV[@]}" timeout 90 "$PY" "$HERE/view_probe.py" torch >"$W/e1" 2>&1; sed 's/^/env -i: /' "$W/e1" | show
check "a process started with env -i ${EENV[*]} sees total = cap" "$(is torch.total "$W/e1" "$CAP")"
say "[$(elapsed) s]"

say
say "## The CUDA runtime's lookups (traced build, torch): trace.txt"
inview -t $P torch >"$W/tt" 2>"$OUT/trace.txt"
sed 's/^/traced: /' "$W/tt" | show
grep '^view: ' "$OUT/trace.txt" | grep -vE '^view: cuGetProcAddress [^:]' | sort | uniq -c | sort -rn | head -30 | show
say "cuGetProcAddress lookups: $(grep -cE '^view: cuGetProcAddress [^:]' "$OUT/trace.txt"); of our names: $(grep -E '^view: cuGetProcAddress (cuMemGetInfo|cuDeviceTotalMem|cuGetProcAddress|cuDeviceGetUuid|cuCtxGetDevice) ' "$OUT/trace.txt" | sort | uniq -c | tr '\n' ';')"
say "[$(elapsed) s]"

say
say "## JAX with its defaults, without and with the library"
$P jax >"$W/j0" 2>"$W/j0.err"; sed 's/^/without: /' "$W/j0" | show
inview $P jax >"$W/j1" 2>"$W/j1.err"; sed 's/^/with: /' "$W/j1" | show
check "JAX starts with its defaults, with the library" "$(is jax.ok "$W/j1" 1)" "(bytes_limit $(mib "$(val jax.bytes_limit "$W/j1")") MiB, cap $CAP_MIB MiB)"
check "JAX's pool (0.75 x total) can be filled with the library (0.9 of it in one array)" "$(is jax.fill "$W/j1" 1)"
if [ "$(val jax.ok "$W/j1")" != 1 ]; then
	tail -3 "$W/j1.err" | sed 's/^/stderr: /' | show
	inview -t $P jax >/dev/null 2>"$OUT/trace-jax.txt"
	say "JAX traced: $(grep '^view: ' "$OUT/trace-jax.txt" | grep -vE '^view: cuGetProcAddress [^:]' | sort | uniq -c | head -12 | tr '\n' ';')"
fi
say "[$(elapsed) s]"

say
# Short rounds, ABBA, so that the GPU's and the machine's drift (seconds
# long: +-15% between 5 s rounds on 2026-11-28) falls on both sides alike;
# the first ABBA block is warm-up; each process on a core of its own.
ROUNDS=26 SECS=1.5
[ "$(elapsed)" -gt 150 ] && ROUNDS=14
say "## Small-kernel throughput with and without: $ROUNDS rounds of $SECS s each side, ABBA, one MPS client each (batch 8 through six 2048x2048 fp16 layers, synchronized each step)"
B=$W/bench; mkdir -p "$B"
PIN1=() PIN2=()
command -v taskset >/dev/null && [ "$(nproc)" -ge 4 ] && PIN1=(taskset -c 2) PIN2=(taskset -c 3)
"${PIN1[@]}" $P bench without "$B" $ROUNDS $SECS 2>"$B/without.err" &
BENCH_PIDS+=($!)
inview "${PIN2[@]}" $P bench with "$B" $ROUNDS $SECS 2>"$B/with.err" &
BENCH_PIDS+=($!)
alive() { local p; for p in "${BENCH_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done; }
for _ in $(seq 900); do { [ -e "$B/ready.without" ] && [ -e "$B/ready.with" ]; } && break; alive || break; sleep 0.1; done
for r in $(seq 0 $((ROUNDS - 1))); do
	if [ $((r % 2)) = 0 ]; then order="without with"; else order="with without"; fi
	for role in $order; do
		touch "$B/go.$role.$r"
		for _ in $(seq 400); do [ -e "$B/$role.$r" ] && break; alive || break; sleep 0.02; done
	done
done
wait "${BENCH_PIDS[@]}" 2>/dev/null
wo=$(for r in $(seq 2 $((ROUNDS - 1))); do cat "$B/without.$r" 2>/dev/null; done | tr '\n' ' ')
wi=$(for r in $(seq 2 $((ROUNDS - 1))); do cat "$B/with.$r" 2>/dev/null; done | tr '\n' ' ')
say "steps/s without (rounds 2..): $wo"
say "steps/s with    (rounds 2..): $wi"
ratio=$($PY -c 'import statistics as s, sys
a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]
if not a or len(a) != len(b): print("nan nan"); sys.exit()
print(f"{sum(b)/sum(a):.4f} {s.median(y/x for x, y in zip(a, b)):.4f}")' "$wo" "$wi")
say "with / without: ratio of the sums, median of the rounds' ratios: $ratio"
check "throughput with / without >= 0.99 (ratio of the sums)" "$($PY -c 'import sys; sys.exit(0 if sys.argv[1] != "nan" and float(sys.argv[1]) >= 0.99 else 1)' "${ratio%% *}"; echo $?)"
[ -s "$B/with.err" ] && tail -2 "$B/with.err" | sed 's/^/with stderr: /' | show
[ -s "$B/without.err" ] && tail -2 "$B/without.err" | sed 's/^/without stderr: /' | show
say
say "done in $(elapsed) s; $([ $FAIL = 0 ] && echo 'all PASS' || echo 'FAILURES above')"
