#!/usr/bin/env bash
# The view through the daemon on the GPU host (issue 38, docs/containers.md
# "What software in a slice sees"): the daemon from the bundle writes the
# CDI spec with the view (mps_view_library: the bundle's
# libyunion-mps-view.so) and each device's view file; every client starts
# as a container would, with the spec's environment, mounts and device
# nodes alone (clients/cdi_run.py, which applies the library, the device's
# view directory and the preload list over /etc/ld.so.preload in a mount
# namespace of its own).
#   make gpu-bundle          (.gpu-bundle: the binaries and the library)
#   device run: bash tests/gpu/view.sh   with carry [".gpu-bundle"]   (timeout 600 s)
# The report goes to $OUT/gpu-view.md (kept in docs/gpu-runs/); every check
# is a PASS or FAIL line, and the exit status is 1 when any failed.
#
# Checks, each GPU split in four (virtual_number 4, the per-GPU layout):
# PyTorch in a slice sees total = cap (mem_get_info, get_device_properties);
# vLLM's start rule with its default 0.9 passes and what it would then take
# (0.9 x total less what is used) allocates and a matmul runs; nvidia-smi in
# the container shows the cap; on GPU 0 also NVML as pynvml asks it, JAX's
# default preallocation (0.75 x total) and a fill of it, free = cap less
# what the device's other processes use (the daemon's used_bytes), a client
# without the library (its mount removed: it runs, sees the whole card, and
# /status reports it), and small-kernel throughput (CPU-bound: tiny
# launches) with and without the view: at least 0.99 at 95% confidence
# over 12 fresh processes a side, where the interval's half-width (the
# spread between processes counted) must be within 1% for the comparison
# to tell 1% on this host (tests/gpu/abba.py). Then the
# single pipe layout on every GPU,
# and a Kubernetes claim of an odd size (mps-daemon-kubernetes on a DRA
# checkpoint, as claims.sh, no API server).
#
# Never changes the card's settings (mps_set_exclusive_compute_mode: false);
# MPS gets its own pipe and log roots, quit at the end. Every wait is
# bounded; about 4 minutes on one GPU. Where the host has no
# /etc/ld.so.preload, an empty one is created for the run (the bind mount
# needs a file to cover; an empty list preloads nothing) and removed at the
# end; the report says so.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-view-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/../../.gpu-bundle
C=$HERE/clients
P=$HERE/view_probe.py
REPORT=$OUT/gpu-view.md
W=$(mktemp -d /tmp/gv.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19361
T0=$(date +%s)
. "$HERE/lib.sh"
MADE_PRELOAD=
trap 'cleanup; [ -n "$MADE_PRELOAD" ] && [ ! -s /etc/ld.so.preload ] && rm -f /etc/ld.so.preload' EXIT
: >"$REPORT"
LIB=$(cd "$B" 2>/dev/null && pwd)/libyunion-mps-view.so
VLIB=/run/yunion-mps/lib/libyunion-mps-view.so
elapsed() { echo $(( $(date +%s) - T0 )); }
val() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }   # val KEY FILE
mib() { echo $(( ${1:-0} / 1048576 )); }
# st EXPR: a Python expression of s, the daemon's /status.
st() { python3 -c 'import json,sys,urllib.request
s = json.load(urllib.request.urlopen("http://" + sys.argv[1] + "/status", timeout=5))
print(eval(sys.argv[2]))' "$DAEMON_ADDR" "$1" 2>/dev/null; }
capof() { st "[d['cap_bytes'] for d in s.get('devices') or [] if d['name'] == '$1'][0]"; }   # capof DEVICE: bytes
# stop PID: SIGTERM, at most 30 s, then SIGKILL; its exit status.
stop() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 150); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# finish PID SECONDS: wait for a client at most SECONDS; its exit status (124 when killed).
finish() { for _ in $(seq $(( $2 * 5 ))); do kill -0 "$1" 2>/dev/null || { wait "$1"; return; }; sleep 0.2; done
	kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; return 124; }
ctlp() { local p=$1; shift; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$(priv_dir "$p") timeout 10 nvidia-cuda-mps-control 2>&1; }
# in_dev DEVICE [VAR=VALUE...] [--without=PATH] -- CMD...: CMD as a
# container given DEVICE of $SPEC. It execs, so that $! of `in_dev ... &`
# is the client's own PID.
in_dev() { exec python3 "$C/cdi_run.py" "$SPEC" "$@"; }
# smi DEVICE UUID: nvidia-smi's memory.total, used, free (MiB) in the container.
smi() { (in_dev "$1" -- timeout 60 nvidia-smi --id="$2" --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits) 2>>"$W/smi.err" | tr -d ' '; }
# torch_in DEVICE FILE [cdi_run args]: view_probe.py torch as a container of DEVICE.
torch_in() { local d=$1 f=$2; shift 2; (in_dev "$d" "$@" -- timeout 150 python3 "$P" torch) >"$f" 2>"$f.err"; }

say "# The view through the daemon: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block
for f in mps-daemon mps-daemon-kubernetes mps-inventory mpsctl libyunion-mps-view.so; do
	[ -e "$B/$f" ] || { say "- FAIL: $B/$f is missing (make gpu-bundle builds it)"; exit 1; }
done
# The loader's $PLATFORM here: the preload list names the library through
# it (pkg/view/platform.go); a name the platform directory lacks would
# leave every client without the view.
say "the loader's \$PLATFORM here: $(LD_DEBUG=libs LD_LIBRARY_PATH='/nonexistent/$PLATFORM' /bin/true 2>&1 | sed -n 's|.*search path=/nonexistent/\([^/:]*\).*|\1|p' | head -1)"
say "library: $LIB, needs at most $(objdump -T "$LIB" 2>/dev/null | grep -F '*UND*' | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1) (objdump -T, *UND*); $(ldd --version | head -1); $(python3 -c 'import torch; print("torch", torch.__version__)' 2>&1)"
if [ ! -e /etc/ld.so.preload ]; then
	: >/etc/ld.so.preload && MADE_PRELOAD=1
	say "note: this host had no /etc/ld.so.preload; an empty one was created for the run (an empty list preloads nothing) so that each client's mount namespace can cover it with the spec's, and removed at the end"
fi
mapfile -t UU < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
mapfile -t BB < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader)
mapfile -t TT < <(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | tr -d ' ')
NG=${#UU[@]}
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
say "GPUs: $NG, each split in 4"

start_inventory
write_conf() { # write_conf PIPE_ROOT LOG_ROOT [extra lines]
	{
		host_conf "$1" "$2" gpu-view
		cat <<CONF
mps_thread_percentage: even
mps_accounting: report
mps_sync_interval: 2s
mps_health_interval: 1s
mps_view_library: $LIB
${3:-}
CONF
	} >"$W/host.conf"
}
{ echo "devices:"; for i in "${!UU[@]}"; do printf -- '- path: "%s"\n  type: NVIDIA_MPS\n  virtual_number: 4\n' "${BB[i]}"; done; } >"$W/devices.yml"
SPEC=$W/cdi/yunion.io-mps-gpu.yaml
view_on() { [ "$(st 's["view"]["state"]')" = on ]; }

say
say "## 1. Per-GPU layout: each GPU's device 0 seen from its container"
write_conf "$W/pipe" "$W/log"
start_daemon "$W/daemon.log"
wait_ready; check "daemon ready" $?
until_ok 30 view_on; check "/status: the view is on" $? "($(st 's["view"]'))"
grep -q "containerPath: /etc/ld.so.preload" "$SPEC"; check "the spec mounts the preload list (and the library, the view directories)" $?
for i in "${!UU[@]}"; do
	u=${UU[i]} dev=${UU[i]}::0
	CAP[i]=$(capof "$dev"); c=${CAP[i]}
	torch_in "$dev" "$W/torch-$i"
	sed "s/^/GPU $i torch: /" "$W/torch-$i" | tee -a "$REPORT" >/dev/null
	check "GPU $i: PyTorch's mem_get_info total is the cap" "$([ "$(val torch.total "$W/torch-$i")" = "$c" ]; echo $?)" "($(mib "$(val torch.total "$W/torch-$i")") MiB; cap $(mib "$c") MiB of ${TT[i]})"
	check "GPU $i: get_device_properties(0).total_memory is the cap" "$([ "$(val torch.total_memory "$W/torch-$i")" = "$c" ]; echo $?)"
	check "GPU $i: vLLM's start rule with 0.9 passes" "$([ "$(val vllm.rule "$W/torch-$i")" = 1 ]; echo $?)" "($(grep '^vllm.rule' "$W/torch-$i" | cut -d' ' -f3-))"
	check "GPU $i: what vLLM would take (0.9 x total less used) allocates, a matmul runs" "$([ "$(val vllm.alloc "$W/torch-$i")" = 1 ]; echo $?)" "($(grep '^vllm.alloc' "$W/torch-$i" | cut -d' ' -f3-))"
	SMI[i]=$(smi "$dev" "$u")
	check "GPU $i: nvidia-smi in the container shows the cap as memory.total" "$([ "${SMI[i]%%,*}" = "$(mib "$c")" ]; echo $?)" "(total,used,free: ${SMI[i]} MiB)"
done
say "[$(elapsed) s]"

D0=${UU[0]}::0 C0=${CAP[0]}
(in_dev "$D0" -- timeout 60 python3 "$P" nvml) >"$W/nvml" 2>&1
sed 's/^/NVML: /' "$W/nvml" | tee -a "$REPORT" >/dev/null
check "GPU 0: NVML's memory info (as pynvml asks) is the cap" "$([ "$(val nvml.total "$W/nvml")" = "$C0" ]; echo $?)" "($(mib "$(val nvml.total "$W/nvml")") MiB)"
(in_dev "$D0" -- timeout 150 python3 "$P" jax) >"$W/jax" 2>"$W/jax.err"
sed 's/^/JAX: /' "$W/jax" | tee -a "$REPORT" >/dev/null
JL=$(val jax.bytes_limit "$W/jax")
check "GPU 0: JAX starts with its defaults (preallocation of 0.75 x total)" "$([ "$(val jax.ok "$W/jax")" = 1 ]; echo $?)" "(bytes_limit $(mib "$JL") MiB, cap $(mib "$C0") MiB)"
check "GPU 0: JAX's pool is within the cap and can be filled (0.9 of it in one array)" "$([ -n "$JL" ] && [ "$JL" -gt 0 ] && [ "$JL" -le "$C0" ] && [ "$(val jax.fill "$W/jax")" = 1 ]; echo $?)"
[ "$(val jax.ok "$W/jax")" = 1 ] || tail -3 "$W/jax.err" | sed 's/^/JAX stderr: /' | tee -a "$REPORT" >/dev/null
say "[$(elapsed) s]"

say
say "## 2. free follows the device's use (the daemon's used_bytes); a client without the library"
H=$(( $(mib "$C0") / 4 ))
(in_dev "$D0" -- python3 "$C/hold.py" 60 "$H") >"$W/hold.log" 2>&1 &
HOLD=$!; PIDS+=($HOLD)
until_ok 120 grep -qE 'started|died' "$W/hold.log"
used_enough() { [ "$(st "[d['used_bytes'] for d in s['devices'] if d['name'] == '$D0'][0]")" -ge $(( H << 20 )) ] 2>/dev/null; }
until_ok 30 used_enough; check "the daemon measured the holder's $H MiB on $D0" $? "(used_bytes $(st "[d['used_bytes'] for d in s['devices'] if d['name'] == '$D0'][0]"))"
VF=$W/state/view/${UU[0]}.0/memory
say "the device's view file: $(tr '\n' ' ' <"$VF" 2>/dev/null)"
torch_in "$D0" "$W/torch-used"
TF=$(val torch.free "$W/torch-used")
check "a new process's free is the cap less what the device uses" "$([ "$(val torch.total "$W/torch-used")" = "$C0" ] && [ -n "$TF" ] && [ "$TF" -le $(( C0 - (H << 20) )) ]; echo $?)" "(free $(mib "$TF") MiB, total $(mib "$(val torch.total "$W/torch-used")") MiB, holder $H MiB)"
stop "$HOLD"

torch_in "$D0" "$W/torch-without" "--without=$VLIB"
check "a client whose library mount is missing still runs" "$([ -n "$(val torch.total "$W/torch-without")" ]; echo $?)" "(the loader: $(grep -c 'cannot be preloaded' "$W/torch-without.err") line(s) 'cannot be preloaded ... ignored')"
check "...and sees the whole card" "$([ "$(val torch.total "$W/torch-without")" -gt "$C0" ] 2>/dev/null && [ "$(val maps.view "$W/torch-without")" = 0 ]; echo $?)" "(total $(mib "$(val torch.total "$W/torch-without")") MiB)"
(in_dev "$D0" "--without=$VLIB" -- python3 "$C/hold.py" 40 256) >"$W/noview.log" 2>&1 &
NOVIEW=$!; PIDS+=($NOVIEW)
until_ok 120 grep -qE 'started|died' "$W/noview.log"
listed() { st "[w['pid'] for w in (s.get('accounting') or {}).get('clients_without_view') or []]" | grep -qw "$NOVIEW"; }
until_ok 30 listed; check "/status lists it among the clients without the view" $? "(PID $NOVIEW: $(st "[w['reason'][:60] for w in s['accounting'].get('clients_without_view') or [] if w['pid'] == $NOVIEW]"))"
check "...and counts it on its device" "$([ "$(st "[d.get('clients_without_view', 0) for d in s['devices'] if d['name'] == '$D0'][0]")" -ge 1 ] 2>/dev/null; echo $?)"
check "...and never terminates it" "$(kill -0 "$NOVIEW" 2>/dev/null; echo $?)"
stop "$NOVIEW"
say "[$(elapsed) s]"

say
SECS=75 K=12
say "## 3. Small-kernel throughput on $D0, with and without the view: $K fresh processes a side, ${SECS} s of rounds of one ~15 ms block each on one core; the unit of comparison is the process (tests/gpu/abba.py)"
BD=$W/bench; mkdir -p "$BD"
ROLES=()
for i in $(seq "$K"); do ROLES+=("with.$i" "without.$i"); done
for r in "${ROLES[@]}"; do mkfifo "$BD/cmd.$r" "$BD/res.$r"; done
# Started together, each on any core (the imports and CUDA start run in
# parallel); once warmed up each pins all its threads to one core (serve's
# CPU argument), where they take turns, the others waiting on their FIFOs:
# the same CPU, caches and clocks for each block. ASLR stays on (abba.py
# says why).
PINCPU=-
[ "$(nproc)" -ge 4 ] && PINCPU=2
S3=$(date +%s)
BP=()
for r in "${ROLES[@]}"; do
	case $r in
	with.*) (in_dev "$D0" -- python3 "$P" serve "$r" "$BD" "$PINCPU") 2>"$BD/$r.err" & ;;
	*) (in_dev "$D0" "--without=$VLIB" --without=/etc/ld.so.preload -- python3 "$P" serve "$r" "$BD" "$PINCPU") 2>"$BD/$r.err" & ;;
	esac
	BP+=($!); PIDS+=($!)
done
alive() { local p; for p in "${BP[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done; }
started() { local r; for r in "${ROLES[@]}"; do [ -e "$BD/ready.$r" ] || return 1; done; }
for _ in $(seq 900); do started && break; alive || break; sleep 0.1; done
say "the $((2 * K)) clients were ready $(( $(date +%s) - S3 )) s after their start"
if started; then
	timeout $((SECS + 60)) python3 "$HERE/abba.py" "$BD" "$SECS" "$K" >"$BD/abba.out" 2>"$BD/abba.err"
else
	echo "error the clients did not start" >"$BD/abba.out"
fi
for p in "${BP[@]}"; do finish "$p" 30; done
sed 's/^/abba: /' "$BD/abba.out" | tee -a "$REPORT" >/dev/null
GM=$(val view.ratio "$BD/abba.out") GLO=$(val view.lo "$BD/abba.out") GHI=$(val view.hi "$BD/abba.out")
HW=$(val control.halfwidth "$BD/abba.out")
RATIO="$GM (95% CI $GLO..$GHI over $K processes a side, Hodges-Lehmann; half-width $HW; Welch's $(val view.welch_ratio "$BD/abba.out"), $(val view.welch_lo "$BD/abba.out")..$(val view.welch_hi "$BD/abba.out"); spread between processes with $(val spread.with "$BD/abba.out")%, without $(val spread.without "$BD/abba.out")%; $(val rounds "$BD/abba.out") rounds)"
say "throughput with / without the view, the processes' Hodges-Lehmann ratio: $RATIO"
# in_range X Y: X >= Y (0 when both are numbers and it holds)
in_range() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$@" 2>/dev/null; }
check "the comparison can tell 1%: the 95% interval's half-width, the spread between processes counted, is at most 1%" \
	"$(in_range 0.01 "$HW"; echo $?)" "(half-width $HW; each process's own speed known to $(val process.precision "$BD/abba.out")%)"
check "throughput with the view is at least 0.99 of without (the 95% interval's lower bound)" "$(in_range "$GLO" 0.99; echo $?)" "($GLO..$GHI, ratio $GM)"
for f in "${ROLES[@]}"; do [ -s "$BD/$f.err" ] && tail -2 "$BD/$f.err" | sed "s/^/$f stderr: /" | tee -a "$REPORT" >/dev/null; done
[ -s "$BD/abba.err" ] && tail -3 "$BD/abba.err" | sed "s/^/abba stderr: /" | tee -a "$REPORT" >/dev/null
say "[$(elapsed) s]"

stop "$DPID"
for u in "${UU[@]}"; do ctlp "$W/pipe/$u" quit >/dev/null; done

say
say "## 4. Single pipe layout: one control daemon for every GPU, each device's container sees its cap"
write_conf "$W/pipe1" "$W/log1" "mps_pipe_layout: single"
start_daemon "$W/daemon-single.log"
wait_ready; check "daemon ready in the single layout" $?
until_ok 30 view_on; check "/status: the view is on" $?
for i in "${!UU[@]}"; do
	dev=${UU[i]}::0; c=$(capof "$dev")
	torch_in "$dev" "$W/torch-single-$i"
	check "single layout, GPU $i: PyTorch sees total = cap (mem_get_info, total_memory)" "$([ "$(val torch.total "$W/torch-single-$i")" = "$c" ] && [ "$(val torch.total_memory "$W/torch-single-$i")" = "$c" ]; echo $?)" "($(mib "$(val torch.total "$W/torch-single-$i")") MiB; cap $(mib "$c") MiB)"
	s=$(smi "$dev" "${UU[i]}")
	check "single layout, GPU $i: nvidia-smi shows the cap" "$([ "${s%%,*}" = "$(mib "$c")" ]; echo $?)" "($s)"
done
stop "$DPID"
ctlp "$W/pipe1" quit >/dev/null
say "[$(elapsed) s]"

say
say "## 5. A Kubernetes claim of an odd size on GPU 0 (mps-daemon-kubernetes, prepared claims from a DRA checkpoint, no API server)"
SIZE=$(( TT[0] * 3 / 10 + 7 ))
cat >"$W/host-k8s.conf" <<CONF
enable_cuda_mps: true
container_device_config_file: $W/devices-k8s.yml
cuda_mps_pipe_directory: $W/pipe
cuda_mps_log_directory: $W/log
mps_pipe_layout: per-gpu
mps_listen_address: $DAEMON_ADDR
mps_state_directory: $W/state
mps_cdi_directory: $W/cdi
mps_thread_percentage: even
mps_set_exclusive_compute_mode: false
mps_accounting: report
mps_host_name: gpu-view
mps_sync_interval: 2s
mps_health_interval: 1s
mps_view_library: $LIB
CONF
printf 'devices:\n- path: "%s"\n  type: NVIDIA_MPS\n  virtual_number: 4\n  sharing: claims\n' "${BB[0]}" >"$W/devices-k8s.yml"
cat >"$W/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
KC
mkdir -p "$W/plugin" "$W/registry"
MINOR=$(nvidia-smi -q -i "${UU[0]}" | awk -F: '/Minor Number/ {gsub(/ /,"",$2); print $2; exit}')
GPU_MINOR=$MINOR python3 "$C/claims_checkpoint.py" "$W/plugin/checkpoint.json" "${UU[0]}" gpu-view 4 "${TT[0]}" "odd:$SIZE"
"$B/mps-daemon-kubernetes" --config "$W/host-k8s.conf" --log-level debug kubernetes --node-name gpu-view \
	--kubeconfig "$W/kubeconfig" --plugin-dir "$W/plugin" --registrar-dir "$W/registry" 2>"$W/daemon-k8s.log" &
DPID=$!; PIDS+=($DPID)
wait_ready; check "mps-daemon-kubernetes ready" $?
SPEC=$W/cdi/yunion.io-mps-claim.yaml
CD=${UU[0]}::1000
has_claim() { grep -q "name: $CD" "$SPEC" 2>/dev/null && grep -q "containerPath: /etc/ld.so.preload" "$SPEC"; }
until_ok 30 has_claim; check "the claim's CDI entry mounts the view" $?
torch_in "$CD" "$W/torch-claim"
check "a claim of $SIZE MiB: PyTorch sees total = its size" "$([ "$(val torch.total "$W/torch-claim")" = $(( SIZE << 20 )) ] && [ "$(val torch.total_memory "$W/torch-claim")" = $(( SIZE << 20 )) ]; echo $?)" "($(mib "$(val torch.total "$W/torch-claim")") MiB)"
check "the claim: vLLM's start rule passes and its share allocates" "$([ "$(val vllm.rule "$W/torch-claim")" = 1 ] && [ "$(val vllm.alloc "$W/torch-claim")" = 1 ]; echo $?)" "($(grep '^vllm.alloc' "$W/torch-claim" | cut -d' ' -f3-))"
s=$(smi "$CD" "${UU[0]}")
check "the claim: nvidia-smi shows its size" "$([ "${s%%,*}" = "$SIZE" ]; echo $?)" "($s)"
stop "$DPID"
ctlp "$W/pipe/${UU[0]}" quit >/dev/null

say
say "## What software in a slice sees (GPU 0, device 0: a quarter of the card; MiB)"
say
say "| question | without the view (library mount missing) | with the view |"
say "|---|---|---|"
say "| torch.cuda.mem_get_info() total | $(mib "$(val torch.total "$W/torch-without")") | $(mib "$(val torch.total "$W/torch-0")") |"
say "| torch.cuda.mem_get_info() free | $(mib "$(val torch.free "$W/torch-without")") | $(mib "$(val torch.free "$W/torch-0")") |"
say "| get_device_properties(0).total_memory | $(mib "$(val torch.total_memory "$W/torch-without")") | $(mib "$(val torch.total_memory "$W/torch-0")") |"
say "| vLLM's rule, free >= 0.9 x total | $(grep '^vllm.rule' "$W/torch-without" | cut -d' ' -f2-) | $(grep '^vllm.rule' "$W/torch-0" | cut -d' ' -f2-) |"
say "| nvidia-smi memory.total, used, free | (the card) | ${SMI[0]} |"
say "| JAX's pool (bytes_limit) | | $(mib "$JL") |"
say "| small kernels, steps/s with / without | | $RATIO |"

say
CM_AFTER=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
check "compute modes untouched" "$([ "$CM_BEFORE" = "$CM_AFTER" ]; echo $?)" "($CM_BEFORE)"
say "done in $(elapsed) s"
if [ $FAIL = 0 ]; then say "RESULT: PASS"; else say "RESULT: FAIL"; fi
exit $FAIL
