#!/usr/bin/env bash
# GPU-host proof of claims of any size (issue 35, docs/kubernetes.md):
#   make gpu-bundle            (here: .gpu-bundle/ with mps-daemon-kubernetes)
#   device run: bash tests/gpu/claims.sh   with carry [".gpu-bundle"]
# The report goes to $OUT/gpu-claims.md (copied into docs/gpu-runs/ by hand);
# every check is a PASS or FAIL line and the exit status is 1 when any failed.
#
# The first GPU is shared by claims (sharing: claims, virtual_number 4) and
# three claims are prepared on it: 40, 20 and 20 GiB where the GPU has
# 100 GiB or more, 20, 10 and 10 GiB on an 80 GiB card (an eighth, a
# sixteenth and a sixteenth of smaller ones). There is no kube-apiserver on
# the GPU host, so the claims come the way they come back after a restart:
# clients/claims_checkpoint.py writes the DRA driver's checkpoint, and
# mps-daemon-kubernetes, started on it with a kubeconfig that reaches no
# API server, makes each claim's CDI entry and identity file and bills the
# claims' processes (its publication of ResourceSlices waits in the
# background; tests/k8s's TestClaimsFromACheckpointWithoutAnAPIServer runs
# the same start on the simulated host). Each client is started as a
# container runtime applies the claims' CDI spec: its own mount namespace,
# the entry's environment alone, the pipe directory read-only with
# control_privileged masked, the claim's identity file bind-mounted
# read-only (as run.sh's in_device).
#
# Checks: the control daemon's default is the whole GPU (a claim's client
# lowers it); three clients at once, one per claim, stop at their claims'
# sizes; under mps_accounting: enforce a process of the third claim that
# drops CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (so MPS gives it the whole GPU) and
# goes past its claim's size is terminated, while the other claims'
# processes run on; a restart of the daemon keeps the claims' entries.
# It never changes the card's settings (mps_set_exclusive_compute_mode:
# false) and gives MPS its own pipe and log roots.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-claims-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/../../.gpu-bundle
C=$HERE/clients
REPORT=$OUT/gpu-claims.md
W=$(mktemp -d /tmp/gc.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19351
. "$HERE/lib.sh"
: >"$REPORT"
say "# Claims of any size on one GPU: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block
if [ ! -x "$B/mps-daemon-kubernetes" ]; then
	say "- FAIL: $B/mps-daemon-kubernetes is missing (make gpu-bundle builds it)"
	exit 1
fi
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
PIPE=$W/pipe/$UUID
if [ "$TOTAL" -ge 102400 ]; then SIZES=(40960 20480 20480)
elif [ "$TOTAL" -ge 61440 ]; then SIZES=(20480 10240 10240)
else q=$(( TOTAL / 8 / 256 * 256 )); SIZES=($q $(( q / 2 / 256 * 256 )) $(( q / 2 / 256 * 256 ))); fi
NAMES=(claim-a claim-b claim-c)
say "GPU $UUID at $BUS, $TOTAL MiB; claims of ${SIZES[*]} MiB"

cat >"$W/host.conf" <<CONF
enable_cuda_mps: true
container_device_config_file: $W/devices.yml
cuda_mps_pipe_directory: $W/pipe
cuda_mps_log_directory: $W/log
mps_pipe_layout: per-gpu
mps_listen_address: $DAEMON_ADDR
mps_state_directory: $W/state
mps_cdi_directory: $W/cdi
mps_thread_percentage: even
mps_set_exclusive_compute_mode: false
mps_accounting: enforce
mps_host_name: gpu-claims
mps_sync_interval: 2s
mps_health_interval: 1s
CONF
printf 'devices:\n- path: "%s"\n  type: NVIDIA_MPS\n  virtual_number: 4\n  sharing: claims\n' "$BUS" >"$W/devices.yml"
# A kubeconfig that reaches no API server (port 9, discard: refused).
cat >"$W/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
KC
say
say "## 1. The plan and the prepared claims"
"$B/mps-daemon-kubernetes" --config "$W/host.conf" check-config 2>&1 | block
check "check-config accepts sharing: claims" "${PIPESTATUS[0]}"
mkdir -p "$W/plugin" "$W/registry"
MINOR=$(nvidia-smi -q -i "$UUID" | awk -F: '/Minor Number/ {gsub(/ /,"",$2); print $2; exit}')
GPU_MINOR=$MINOR python3 "$C/claims_checkpoint.py" "$W/plugin/checkpoint.json" "$UUID" gpu-claims 4 "$TOTAL" \
	"${NAMES[0]}:${SIZES[0]}" "${NAMES[1]}:${SIZES[1]}" "${NAMES[2]}:${SIZES[2]}"
check "the DRA checkpoint of three prepared claims written" $?
start_k8s() { # start_k8s LOGFILE
	"$B/mps-daemon-kubernetes" --config "$W/host.conf" --log-level debug kubernetes --node-name gpu-claims \
		--kubeconfig "$W/kubeconfig" --plugin-dir "$W/plugin" --registrar-dir "$W/registry" 2>"$1" &
	DPID=$!; PIDS+=($DPID)
}
SPEC=$W/cdi/yunion.io-mps-claim.yaml
entries() { python3 -c 'import sys,yaml; print(len(yaml.safe_load(open(sys.argv[1]))["devices"]))' "$SPEC" 2>/dev/null; }
six() { [ "$(entries)" = 6 ]; }
start_k8s "$W/daemon.log"
wait_ready; check "mps-daemon-kubernetes ready (reconciled with no API server)" $?
until_ok 30 six; check "the claims' CDI spec holds the three claims (and their share IDs)" $? "($SPEC)"
say "device names in the claims' spec: $(python3 -c 'import sys,yaml; print(" ".join(d["name"] for d in yaml.safe_load(open(sys.argv[1]))["devices"]))' "$SPEC" 2>&1)"
DEF=$(ctl get_default_device_pinned_mem_limit 0)
say "control daemon defaults: pinned $DEF, threads $(ctl get_default_active_thread_percentage)"
DEFM=$(echo "$DEF" | python3 -c 'import re,sys; s=sys.stdin.read().strip(); m=re.match(r"([0-9.]+)\s*([GM])",s); print(int(float(m.group(1))*(1024 if m.group(2)=="G" else 1)) if m else 0)')
check "the control daemon's default is the whole GPU (a claim's client lowers it to its size)" "$([ "$DEFM" -ge $(( TOTAL - 1024 )) ]; echo $?)" "($DEF for $TOTAL MiB)"
for i in 0 1 2; do
	dev="$UUID::$((1000 + i))"
	python3 "$C/cdi_env.py" "$SPEC" "$dev" >"$W/env-$i" 2>&1
	grep -qx "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${SIZES[$i]}M" "$W/env-$i"
	check "${NAMES[$i]}'s entry ($dev) caps its clients at ${SIZES[$i]} MiB" $? "($(grep PINNED "$W/env-$i"))"
	read -r idh _ < <(python3 "$C/cdi_identity.py" "$SPEC" "$dev")
	check "${NAMES[$i]}'s identity file names $dev" "$([ "$(cat "$idh" 2>/dev/null)" = "$dev" ]; echo $?)" "($idh)"
done

# A process as a container given a claim's CDI entry: the entry's
# environment, mounts and device nodes alone, in a mount namespace of its
# own (clients/cdi_run.py, as multi.sh starts its clients). It execs: call
# it in the background or in $(...), so that $! is the client's PID.
in_claim() { # in_claim I CMD...: CMD as a container given claim I's device
	local i=$1; shift
	exec python3 "$C/cdi_run.py" "$SPEC" "$UUID::$((1000 + i))" -- "$@"
}

say
say "## 2. Three clients at once, one per claim, each with its claim's CDI edits alone"
for i in 0 1 2; do
	in_claim $i python3 "$C/alloc_hold.py" 20 >"$W/client-$i.log" 2>"$W/client-$i.err" &
	CP[$i]=$!
done
reached() { grep -q '^reached' "$W/client-$1.log"; }
for i in 0 1 2; do until_ok 120 reached $i; done
for i in 0 1 2; do
	GOT=$(sed -n 's/^reached //p' "$W/client-$i.log")
	say "${NAMES[$i]}: allocated ${GOT:-nothing} MiB in 256 MiB blocks ($(head -1 "$W/client-$i.err")); its size ${SIZES[$i]} MiB"
	check "${NAMES[$i]}'s client stopped at its size" "$([ -n "$GOT" ] && [ "$GOT" -le "${SIZES[$i]}" ] && [ "$GOT" -gt $(( SIZES[i] - 1536 )) ]; echo $?)" "($GOT <= ${SIZES[$i]}, within 1.5 GiB)"
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | block
for i in 0 1 2; do
	wait "${CP[$i]}"; RC=$?
	check "${NAMES[$i]}'s client held its memory to the end, untouched by the accounting" "$([ $RC = 0 ] && grep -q finished "$W/client-$i.log"; echo $?)" "($(tail -1 "$W/client-$i.log"))"
done

say
say "## 3. Under enforce, a process past its claim's size is terminated; the other claims' run on"
# The third claim's process drops its pinned memory limit: MPS then gives
# it the control daemon's default, the whole GPU, and it takes its claim's
# size and 2 GiB more. Only the accounting, which bills it to the claim by
# its identity file, holds it to the claim: as a limit escape, its
# environment checked as it connects to MPS (issue 39: SIGKILL before it
# allocates), or, were that missed, for its claim's sum over the size on a
# later pass.
OVER=$(( SIZES[2] + 2048 ))
in_claim 0 python3 "$C/hold.py" 40 $(( SIZES[0] / 2 )) >"$W/keep-0.log" 2>&1 &
K0=$!
in_claim 1 python3 "$C/hold.py" 40 $(( SIZES[1] / 2 )) >"$W/keep-1.log" 2>&1 &
K1=$!
until_ok 120 grep -q started "$W/keep-0.log"
until_ok 120 grep -q started "$W/keep-1.log"
in_claim 2 env -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT python3 "$C/hold.py" 40 "$OVER" >"$W/over.log" 2>&1 &
PO=$!
until_ok 120 grep -qE 'started|died' "$W/over.log"
say "the escaping process: $(head -1 "$W/over.log") (asked for $OVER MiB of ${NAMES[2]}'s ${SIZES[2]} MiB)"
wait $PO; RO_RC=$?
check "the process past ${NAMES[2]}'s size was terminated" "$([ $RO_RC != 0 ]; echo $?)" "(exit $RO_RC: $(tail -1 "$W/over.log"))"
grep -E "component=accounting.*(terminat|signalled|over)" "$W/daemon.log" | sed 's/^time=[^ ]* //' | cut -c1-400 | block
# The daemon's line, waited for: it may come just after the process is gone.
until_ok 10 grep -qE "accounting: (terminating|signalled) .*device=$UUID::1002 " "$W/daemon.log"
check "...by the accounting, as ${NAMES[2]}'s ($UUID::1002)" $?
wait $K0; R0=$?; wait $K1; R1=$?
check "${NAMES[0]}'s process ran on to the end" "$([ $R0 = 0 ] && grep -q finished "$W/keep-0.log"; echo $?)" "($(tail -1 "$W/keep-0.log"))"
check "${NAMES[1]}'s process ran on to the end" "$([ $R1 = 0 ] && grep -q finished "$W/keep-1.log"; echo $?)" "($(tail -1 "$W/keep-1.log"))"
! grep -qE "accounting: terminating.*$UUID::100[01]" "$W/daemon.log"
check "no process of the other claims was terminated" $?

say
say "## 4. A restart of the daemon keeps the claims' entries"
cp "$SPEC" "$W/spec-before.yaml"
kill -TERM $DPID; wait $DPID; check "mps-daemon-kubernetes exits 0 on SIGTERM" $?
start_k8s "$W/daemon2.log"
wait_ready; check "restarted and ready" $?
cmp -s "$SPEC" "$W/spec-before.yaml"; check "the claims' CDI spec is the same after the restart" $?
ctl get_server_list >/dev/null; check "the MPS control daemon kept running" $?

say
CM_AFTER=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
check "the card's compute mode is untouched" "$([ "$CM_BEFORE" = "$CM_AFTER" ]; echo $?)" "($CM_BEFORE)"
say
if [ $FAIL = 0 ]; then say "RESULT: PASS"; else say "RESULT: FAIL"; fi
exit $FAIL
