#!/usr/bin/env bash
# The privileged-socket suite (issue 45, item 3): MPS out of a pod's reach.
#   make gpu-bundle
#   device run: bash tests/gpu/privileged.sh   with carry [".gpu-bundle"]
# One GPU, about 3 minutes. Results: $OUT/gpu-privileged.md (kept in
# docs/gpu-runs/), the logs in $OUT/logs.tgz. Like run.sh it never changes
# the card's settings (compute mode untouched) and gives MPS its own pipe
# and log roots.
#
#  1. the contract tests against the real control: the daemon's Guard
#     moves control_privileged into its private directory as the control
#     daemon starts; quit and set_default_* through the pipe directory are
#     refused, through the private one accepted; a control daemon started
#     by another program beside the placeholder starts and has its socket
#     moved; clients through the pipe directory are served;
#  2. the daemon in the single layout (Cloudpods' pods:
#     CUDA_MPS_PIPE_DIRECTORY=<root>), virtual_number 4, the default
#     host.conf otherwise: the socket out of the pipe root, as /status says;
#  3. a "pod": a mount namespace holding the pipe root, with an empty tmpfs
#     over the daemon's private directory. A long client runs meanwhile.
#     quit and set_default_* from the pod are refused, the control daemon
#     and its defaults stay; a client of the pod is served at the cap;
#  4. set_active_thread_percentage and set_device_pinned_mem_limit from
#     the pod on the running server: answered by MPS, noticed by the daemon
#     (a warning each, /status, /metrics) and put back, how fast;
#  5. the control daemon killed (no client) and started again by the
#     daemon: the new socket moved too; the daemon restarted: the moved
#     socket found, the pod still refused; the long client of section 3
#     ran to its end.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-privileged-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/../../.gpu-bundle
C=$HERE/clients
REPORT=$OUT/gpu-privileged.md
W=$(mktemp -d /tmp/gp.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19361
. "$HERE/lib.sh"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
ADDR=$(echo "$BUS" | tr 'A-F' 'a-f' | sed 's/^[0-9a-f]*://')
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
ROOT=$W/pipe1
PRIV=$ROOT.privileged
PIPE=$ROOT # lib.sh's ctl: the single layout's control daemon
: >"$REPORT"
say "# Privileged-socket suite: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block

say
say "## 1. The contract tests against the real control daemon (the move, the refusals, a restart beside the placeholder, clients served)"
MPS_CONTRACT_REAL=1 MPS_CONTROL_BINARY=$(command -v nvidia-cuda-mps-control) MPS_CONTRACT_GPU=$UUID MPS_CONTRACT_CLIENT="python3 $C/cuda_client.py" \
	timeout 240 "$B/mps.test" -test.run 'TestContractReal|TestClientContractReal' -test.v -test.count=1 2>&1 | tee "$W/contract.log" |
	grep -E '^(--- |    --- |PASS|FAIL|ok)|at most .* after the start' | block
check "the contract tests pass on the real control" "${PIPESTATUS[0]}"

say
say "## 2. The daemon in the single layout, virtual_number 4"
start_inventory
{
	host_conf "$ROOT" "$W/log1" gpu-privileged
	echo "mps_pipe_layout: single"
	echo "mps_health_interval: 1s"
} >"$W/host.conf"
set_vn 4
start_daemon "$W/daemon.log"
wait_ready; check "daemon ready" $?
CAP=$(field "$ADDR-0" mps_memory_limit)
status_gpu() { python3 -c 'import json,sys,urllib.request; g=json.load(urllib.request.urlopen(sys.argv[1], timeout=5))["gpus"][0]; print(g.get("privileged_socket_reachable"), g.get("privileged_socket_reason", ""))' "http://$DAEMON_ADDR/status"; }
foreign() { python3 -c 'import json,sys,urllib.request
a=json.load(urllib.request.urlopen(sys.argv[1], timeout=5)).get("accounting") or {}
n=sum((l.get("foreign_commands") or {}).get(sys.argv[2], 0) for l in (a.get("new_clients") or {}).get("logs") or [])
print(n)' "http://$DAEMON_ADDR/status" "$1"; }
say "pipe root and private directory:"
ls -la "$ROOT" "$PRIV" 2>&1 | block
check "/status: the privileged socket is not reachable from the pipe root" "$([ "$(status_gpu)" = "False " ]; echo $?)" "($(status_gpu))"
[ -S "$PRIV/control_privileged" ] && [ "$(stat -c %a "$PRIV/control_privileged")" = 755 ] && [ "$(stat -c %a "$PRIV")" = 700 ]
check "the control daemon's control_privileged is in the private directory (0700)" $?
[ -S "$ROOT/control_privileged" ] && [ "$(stat -c %a "$ROOT/control_privileged")" = 0 ]
check "the pipe root holds a dead placeholder (mode 0000) under its name, for CDI's mask" $?
say "the window (from the start to the move): $(grep -o 'privileged socket moved out of its pipe directory.*' "$W/daemon.log" | grep -o 'window=[^ ]*' | tr '\n' ' ')"
DEF_PCT=$(ctl get_default_active_thread_percentage); DEF_MEM=$(ctl get_default_device_pinned_mem_limit 0)
say "the control daemon's defaults (through the private directory): threads $DEF_PCT, pinned memory $DEF_MEM"

say
say "## 3. A pod holding the pipe root: quit and set_default_* refused, its client served, no client dies"
# in_pod CMD...: CMD in a mount namespace of its own that holds the pipe
# root, as Cloudpods' host agent gives it to a pod, and not the private
# directory (an empty tmpfs over it); root, as in the pods.
in_pod() { unshare --mount --propagation private sh -c "mount -t tmpfs none '$PRIV' && exec \"\$@\"" sh "$@"; }
pod_ctl() { in_pod env CUDA_MPS_PIPE_DIRECTORY="$ROOT" sh -c "echo '$*' | timeout 10 nvidia-cuda-mps-control" 2>&1; }
CPID_BEFORE=$(cat "$ROOT/nvidia-cuda-mps-control.pid" 2>/dev/null)
CUDA_MPS_PIPE_DIRECTORY=$ROOT CUDA_VISIBLE_DEVICES=$UUID python3 "$C/hold.py" 60 1024 >"$W/long-client.log" 2>&1 &
LONG=$!
until_ok 60 grep -q started "$W/long-client.log"; check "a long client of the pipe root runs" $? "($(head -1 "$W/long-client.log"))"
SRV=$(ctl get_server_list | head -1)
say "what the pod sees of the private directory: '$(in_pod ls -A "$PRIV")' (empty: hidden)"
Q=$(pod_ctl quit)
say "pod: quit -> $Q"
sleep 1
[ "$(cat "$ROOT/nvidia-cuda-mps-control.pid" 2>/dev/null)" = "$CPID_BEFORE" ] && ctl get_server_list >/dev/null
check "quit from the pod is refused: the control daemon runs on" "$(echo "$Q" | grep -q 'Not enough privilege' && [ "$(cat "$ROOT/nvidia-cuda-mps-control.pid")" = "$CPID_BEFORE" ]; echo $?)" "($Q)"
for c in "set_default_active_thread_percentage 10" "set_default_device_pinned_mem_limit 0 1G" "set_default_client_priority 1"; do
	A=$(pod_ctl "$c")
	say "pod: $c -> $A"
	echo "$A" | grep -q 'Insufficient privileges'; check "$c from the pod is refused" $? "($A)"
done
check "the control daemon's defaults are still the daemon's" "$([ "$(ctl get_default_active_thread_percentage)" = "$DEF_PCT" ] && [ "$(ctl get_default_device_pinned_mem_limit 0)" = "$DEF_MEM" ] && [ "$(ctl get_default_client_priority)" = 0 ]; echo $?)" \
	"(threads $(ctl get_default_active_thread_percentage), memory $(ctl get_default_device_pinned_mem_limit 0), priority $(ctl get_default_client_priority))"
GOT=$(in_pod env CUDA_MPS_PIPE_DIRECTORY="$ROOT" CUDA_VISIBLE_DEVICES="$UUID" python3 "$C/alloc.py" 2>>"$W/client.log")
check "a client of the pod is served, at the cap" "$([ -n "$GOT" ] && [ "$GOT" -le "$CAP" ] && [ "$GOT" -gt $((CAP - 1024)) ]; echo $?)" "($GOT MiB, cap $CAP)"

say
say "## 4. Commands on the running server from the pod: noticed, put back"
OWN_PCT=$(ctl get_active_thread_percentage "$SRV"); OWN_MEM=$(ctl get_device_pinned_mem_limit "$SRV" 0)
say "server $SRV holds threads $OWN_PCT, pinned memory $OWN_MEM"
ms() { date +%s%3N; }
T0=$(ms); A=$(pod_ctl "set_active_thread_percentage $SRV 12")
say "pod: set_active_thread_percentage $SRV 12 -> $A"
back_pct() { [ "$(ctl get_active_thread_percentage "$SRV")" = "$OWN_PCT" ]; }
for _ in $(seq 500); do back_pct && break; sleep 0.02; done; T1=$(ms)
back_pct; check "the thread percentage is put back" $? "($(ctl get_active_thread_percentage "$SRV") after $((T1 - T0)) ms, measured from the pod's command, polled every 20 ms)"
T0=$(ms); A=$(pod_ctl "set_device_pinned_mem_limit $SRV 0 200G")
say "pod: set_device_pinned_mem_limit $SRV 0 200G -> ${A:-(nothing)}"
back_mem() { [ "$(ctl get_device_pinned_mem_limit "$SRV" 0)" = "$OWN_MEM" ]; }
for _ in $(seq 500); do back_mem && break; sleep 0.02; done; T1=$(ms)
back_mem; check "the pinned memory limit is put back" $? "($(ctl get_device_pinned_mem_limit "$SRV" 0) after $((T1 - T0)) ms)"
counted() { [ "$(foreign server)" -ge 2 ]; }
until_ok 10 counted
check "/status counts the pod's commands (daemon: quit, set_default_* x3; server: 2)" "$([ "$(foreign daemon)" = 4 ] && [ "$(foreign server)" = 2 ]; echo $?)" "(daemon $(foreign daemon), server $(foreign server))"
python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://$DAEMON_ADDR/metrics" | grep -E '^mps_(daemon_foreign_control_commands_total|gpu_privileged_socket_reachable)' | block
N=$(grep -c 'MPS control command not sent by this daemon' "$W/daemon.log")
check "one warning per command of the pod" "$([ "$N" = 6 ]; echo $?)" "($N)"
grep -E 'not sent by this daemon|are put back' "$W/daemon.log" | sed 's/^time=[^ ]* //' | block

say
say "## 5. The control daemon started again, the daemon restarted"
wait $LONG; RL=$?
check "the long client ran to its end through sections 3 and 4 (no client died)" "$([ $RL = 0 ] && grep -q finished "$W/long-client.log"; echo $?)" "($(tail -1 "$W/long-client.log"))"
CPID=$(cat "$ROOT/nvidia-cuda-mps-control.pid")
kill -9 "$CPID"
restarted() { local p; p=$(cat "$ROOT/nvidia-cuda-mps-control.pid" 2>/dev/null); [ -n "$p" ] && [ "$p" != "$CPID" ]; }
until_ok 30 restarted
wait_ready
NEWPID=$(cat "$ROOT/nvidia-cuda-mps-control.pid" 2>/dev/null)
check "the daemon started the control daemon again (pid $CPID -> $NEWPID)" "$([ -n "$NEWPID" ] && [ "$NEWPID" != "$CPID" ]; echo $?)"
[ "$(stat -c %a "$ROOT/control_privileged")" = 0 ] && [ "$(stat -c %a "$PRIV/control_privileged")" = 755 ]
check "its new socket was moved too" $? "($(ls -la "$ROOT" "$PRIV" | grep control_privileged | tr -s ' ' | tr '\n' ';'))"
Q=$(pod_ctl quit); check "quit from the pod is refused by the new control daemon" "$(echo "$Q" | grep -q 'Not enough privilege'; echo $?)" "($Q)"
kill -TERM "$DPID"; wait "$DPID"
start_daemon "$W/daemon2.log"
wait_ready; check "the restarted daemon is ready" $?
! grep -q "started MPS control daemon" "$W/daemon2.log"; check "it adopted the control daemon" $?
check "/status: the moved socket is found, not reachable" "$([ "$(status_gpu)" = "False " ]; echo $?)" "($(status_gpu))"
Q=$(pod_ctl quit); check "quit from the pod is still refused" "$(echo "$Q" | grep -q 'Not enough privilege'; echo $?)" "($Q)"
ctl get_server_list >/dev/null; check "the control daemon runs" $?
[ "$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)" = "$CM_BEFORE" ]; check "compute mode untouched ($CM_BEFORE)" $?

say
if [ "$FAIL" = 0 ]; then say "RESULT: PASS"; else say "RESULT: FAIL"; fi
