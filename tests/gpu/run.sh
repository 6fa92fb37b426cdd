#!/usr/bin/env bash
# The GPU suite: one `device` call runs it end to end on a real NVIDIA host.
#   make gpu-bundle            (here: builds .gpu-bundle/, the GPU host has no Go)
#   device run: bash tests/gpu/run.sh   with carry [".gpu-bundle"]
# It never changes the card's settings: the daemon runs with
# mps_set_exclusive_compute_mode: false, and MPS gets its own pipe and log
# directories. Results go to $OUT/gpu-suite.md (copied into docs/ by hand).
# Section 16 runs tests/gpu/qos23.py (issue 23's QoS tables) in what is
# left of GPU_BUDGET_S (default 480 s: the suite ends within 8 minutes),
# when that is at least 150 s ($OUT/qos23.md too); GPU_QOS23=0 leaves it
# out.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-suite-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/../../.gpu-bundle
C=$HERE/clients
REPORT=$OUT/gpu-suite.md
T_START=$(date +%s)
W=$(mktemp -d /tmp/gs.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19331
. "$HERE/lib.sh"

UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
ADDR=$(echo "$BUS" | tr 'A-F' 'a-f' | sed 's/^[0-9a-f]*://')   # 00:06.0, as Cloudpods' addr
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
PIPE=$W/pipe/$UUID
: >"$REPORT"
say "# GPU suite: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say
nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block

say
say "## 1. MPS contract: the simulated control's assertions against the real nvidia-cuda-mps-control"
MPS_CONTRACT_REAL=1 MPS_CONTROL_BINARY=$(command -v nvidia-cuda-mps-control) MPS_CONTRACT_GPU=$UUID MPS_CONTRACT_CLIENT="python3 $C/cuda_client.py" \
	"$B/mps.test" -test.run 'Contract' -test.v -test.count=1 2>&1 | grep -E '^(--- |    --- |PASS|FAIL|ok)' | block
check "contract test (real and simulated control answer alike)" "${PIPESTATUS[0]}"

say
say "## 1b. The NVML adapter against the real library"
MPS_DAEMON_REAL_NVML=1 "$B/nvml.test" -test.run 'TestRealNVML' -test.v -test.count=1 2>&1 | grep -vE '^=== ' | tail -20 | block
check "the adapter reads the GPU as nvidia-smi does" "${PIPESTATUS[0]}"

say
say "## 2. The daemon on the real GPU, virtual_number 4, compute mode untouched"
start_inventory
{
	host_conf "$W/pipe" "$W/log" gpu-suite
	cat <<CONF
mps_thread_percentage: even
mps_sync_interval: 2s
mps_health_interval: 1s
CONF
} >"$W/host.conf"
set_vn 4
say "check-config with the GPU named as /dev/nvidia0:"
"$B/mps-daemon" --config "$W/host.conf" check-config 2>&1 | block
for p in "$BUS" "$(echo "$BUS" | tr 'A-F' 'a-f' | sed 's/^0000//')" "$UUID"; do
	sed -i "s|^- path: .*|- path: \"$p\"|" "$W/devices.yml"
	"$B/mps-daemon" --config "$W/host.conf" check-config >/dev/null 2>&1
	check "check-config resolves path $p" $?
done
set_vn 4

T0=$(date +%s.%N)
start_daemon "$W/daemon.log"
wait_ready; READY=$?
T1=$(date +%s.%N)
check "daemon ready (devices registered with enforced caps)" $READY "in $(python3 -c "print(round($T1-$T0,2))") s"
say "mpsctl isolated-device-list:"
mpsctl isolated-device-list 2>&1 | block
CAP=$(field "$ADDR-0" mps_memory_limit)
N=$(count)
check "4 virtual devices registered" "$([ "$N" = 4 ]; echo $?)" "(total $N, cap $CAP MiB each)"
say "limits read back from the control daemon ($PIPE):"
for c in "get_default_device_pinned_mem_limit 0" get_default_active_thread_percentage; do echo "$c -> $(ctl "$c")"; done | block
# The daemon's own cost on a real host (issue 22's bar, as issue 39 made it:
# its own RSS, less NVML's share, at most lib.sh's OWN_MAX_KB):
# its CPU over 60 idle seconds from 5 s after ready (utime + stime from
# /proc, clock ticks; a measurement recorded, not a timed check) and its
# resident memory at their end, as tests/gpu/escape.sh measures both: an
# idle daemon's, not the first seconds' (25 s after ready, before the
# start's garbage was collected, its own memory was 21,720 kB on an H100
# where a minute later the escape suite measured 19,036 kB).
nvml_share "$UUID"
sleep 5
C0=$(cpu_ticks); sleep 60; C1=$(cpu_ticks)
RSS=$(vm_rss)
say "daemon's own cost, idle with 4 devices: RSS $((RSS / 1024)) MiB ($RSS kB), CPU $(python3 -c "print(round(($C1-$C0)/$(getconf CLK_TCK)/60*100, 3))")% of one core over 60 s"
# What the RSS is made of (issue 22): RssAnon is the daemon's heaps (Go's,
# and NVML's own malloc), RssFile the pages of mapped files (the binary,
# libc, libnvidia-ml.so), RssShmem shared memory; then the mappings by path
# ([anon] the anonymous ones, the Go heap among them) with their resident
# and anonymous kB, and the Go runtime's view of its memory (/metrics).
say "daemon's RSS by kind: $(grep -E '^(RssAnon|RssFile|RssShmem|VmHWM|Threads)' "/proc/$DPID/status" | tr -s ' \t' ' ' | tr '\n' ';')"
say "daemon's resident mappings over 256 kB, by path (kB resident, kB anonymous):"
rss_by_path | block
curl -sf "http://$DAEMON_ADDR/metrics" | grep -E '^go_memstats_(heap_(inuse|idle|released|sys)|stack_inuse|sys)_bytes|^go_gc_gogc|^go_gc_gomemlimit' | block
# The check is of the daemon's own memory (issue 39): the whole RSS (42 MiB
# on an H200, driver 580) failed issue 22's 30 MiB on every run, NVML's
# share of it being what no daemon using NVML can shed (lib.sh's
# nvml_share says how it is measured). The anonymous mappings over 1 MiB
# of address space are listed too: the OS threads' stacks among them
# (NVML's calls run on them), the Go heap's arenas, nvmlInit's arenas.
OWN=$(own_rss "$RSS")
say "NVML's share, measured in a process of our own (kB):"
echo "$NVSHARE" | block
say "daemon's anonymous mappings over 1 MiB of address space (kB size, kB resident):"
awk '/^[0-9a-f]+-[0-9a-f]+ / {a = ($6 == "")} /^Size:/ {s = $2} /^Rss:/ {if (a && s >= 1024) printf "%8d %8d\n", s, $2}' "/proc/$DPID/smaps" | sort -k2 -rn | head -20 | block
check "the daemon's own resident memory (its RSS less NVML's) is at most $((OWN_MAX_KB / 1024)) MiB" "$([ -n "$NVRSS" ] && [ "$OWN" -le "$OWN_MAX_KB" ]; echo $?)" "($OWN kB own; $RSS kB in all, less NVML's ${NVRSS:-unmeasured} kB)"

say
say "## 3. A CUDA client given a virtual device's environment cannot allocate past its cap"
GOT=$(env $(client_env) python3 "$C/alloc.py" 2>>"$W/client.log")
say "client allocated $GOT MiB in 256 MiB blocks; cap $CAP MiB"
check "allocation stopped at the cap" "$([ -n "$GOT" ] && [ "$GOT" -le "$CAP" ] && [ "$GOT" -gt $((CAP - 1024)) ]; echo $?)" "($GOT <= $CAP, within 1 GiB)"
GOT2=$(env $(client_env) CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=200G python3 "$C/alloc.py" 2>>"$W/client.log")
check "a client asking for more (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=200G) still stops at the cap" "$([ -n "$GOT2" ] && [ "$GOT2" -le "$CAP" ]; echo $?)" "($GOT2 MiB)"

say
say "## 4. Restarting the daemon while a CUDA client runs"
env $(client_env) python3 "$C/hold.py" 15 1024 >"$W/restart-client.log" 2>&1 &
CL=$!
until_ok 60 grep -q started "$W/restart-client.log"
SERVER_BEFORE=$(ctl get_server_list)
kill -TERM $DPID; wait $DPID; check "daemon exits 0 on SIGTERM" $?
ctl get_server_list >/dev/null; check "MPS control daemon still running after the daemon stopped" $?
start_daemon "$W/daemon2.log"
wait_ready; check "restarted daemon ready" $?
SERVER_AFTER=$(ctl get_server_list)
check "the same MPS server serves on (adopted, not restarted)" "$([ "$SERVER_BEFORE" = "$SERVER_AFTER" ]; echo $?)" "($SERVER_BEFORE -> $SERVER_AFTER)"
! grep -q "started MPS control daemon" "$W/daemon2.log"; check "restart adopted the control daemon" $?
wait $CL; RC=$?
check "the client ran to the end across the restart" "$([ $RC = 0 ] && grep -q finished "$W/restart-client.log"; echo $?)" "($(tail -1 "$W/restart-client.log"))"
check "still 4 devices, no duplicates" "$([ "$(count)" = 4 ]; echo $?)"

say
say "## 5. Live resize 4 -> 2 while a guest holds device 3 and its client runs"
D3=$(field "$ADDR-3" id)
mpsctl server-attach-isolated-device pod-3 "$D3" >/dev/null; check "device $ADDR-3 attached to pod-3" $?
env $(client_env) python3 "$C/hold.py" 20 4096 >"$W/resize-client.log" 2>&1 &
CL=$!
until_ok 60 grep -q started "$W/resize-client.log"
SERVER=$(ctl get_server_list | head -1)
T0=$(date +%s.%N)
set_vn 2
three() { [ "$(count)" = 3 ]; }
until_ok 30 three
T1=$(date +%s.%N)
say "inventory after the edit (in $(python3 -c "print(round($T1-$T0,2))") s):"
mpsctl isolated-device-list 2>&1 | block
devices | block
NEWCAP=$(field "$ADDR-0" mps_memory_limit)
check "free device $ADDR-2 removed" "$([ -z "$(field "$ADDR-2" id)" ]; echo $?)"
check "held device $ADDR-3 kept, pending removal, still pod-3's" "$([ "$(field "$ADDR-3" pending_removal)" = True ] && [ "$(field "$ADDR-3" guest_id)" = pod-3 ]; echo $?)"
check "devices 0 and 1 carry the 2-way cap" "$([ "$NEWCAP" -gt "$CAP" ] && [ "$(field "$ADDR-0" mps_thread_percentage)" = 50 ]; echo $?)" "($CAP -> $NEWCAP MiB)"
say "running server $SERVER after the resize: pinned $(ctl get_device_pinned_mem_limit "$SERVER" 0), threads $(ctl get_active_thread_percentage "$SERVER"); defaults: $(ctl get_default_device_pinned_mem_limit 0), $(ctl get_default_active_thread_percentage)"
GOT3=$(env $(client_env) python3 "$C/alloc.py" 2>>"$W/client.log")
check "a new client on the running server gets the new cap" "$([ -n "$GOT3" ] && [ "$GOT3" -le "$NEWCAP" ] && [ "$GOT3" -gt "$CAP" ]; echo $?)" "($GOT3 MiB, cap $NEWCAP)"
wait $CL; RC=$?
check "pod-3's client ran to the end through the resize" "$([ $RC = 0 ] && grep -q finished "$W/resize-client.log"; echo $?)" "($(tail -1 "$W/resize-client.log"))"
mpsctl server-detach-isolated-device pod-3 "$D3" >/dev/null
until_ok 30 gone "$ADDR-3"; check "device $ADDR-3 removed once pod-3 released it" $?

say
say "## 6. A faulting client, then recovery"
env $(client_env) python3 "$C/hold.py" 30 >"$W/victim.log" 2>&1 &
V=$!
until_ok 60 grep -q started "$W/victim.log"
env $(client_env) python3 "$C/fault.py" 6 >"$W/fault.log" 2>&1 &
F=$!
until_ok 30 is "$ADDR-0" unhealthy True; check "devices marked unhealthy while the server is in FAULT" $? "($(ctl get_server_status "$(ctl get_server_list | head -1)"))"
mpsctl server-attach-isolated-device pod-x --host gpu-suite --model "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" >"$W/attach-during-fault.log" 2>&1
R=$?
check "no device handed out meanwhile" "$([ $R != 0 ]; echo $?)" "($(head -1 "$W/attach-during-fault.log"))"
wait $F
wait $V; say "the other client of the faulted server: $(tail -1 "$W/victim.log") (MPS kills a faulted server's other clients)"
until_ok 30 is "$ADDR-0" unhealthy False; check "devices healthy again once the faulting client exited" $?
env $(client_env) python3 "$C/hold.py" 2 >"$W/after-fault.log" 2>&1
check "a new client works after the recovery" "$(grep -q finished "$W/after-fault.log"; echo $?)"
grep -E 'GPU (unhealthy|healthy again)|health changed' "$W/daemon2.log" | sed 's/^time=[^ ]* //' | block

say
say "## 7. The CDI spec: a process started with a device's edits is capped"
set_vn 4
four() { [ "$(count)" = 4 ]; }
until_ok 30 four
SPEC=$W/cdi/yunion.io-mps-gpu.yaml
check "CDI spec written" "$([ -s "$SPEC" ]; echo $?)" "($SPEC)"
say "device names in the spec: $(python3 -c 'import sys,yaml; print(" ".join(d["name"] for d in yaml.safe_load(open(sys.argv[1]))["devices"]))' "$SPEC")"
python3 "$C/cdi_env.py" "$SPEC" "$UUID::0" >"$W/cdi.env"
say "environment the spec gives $UUID::0:"
block <"$W/cdi.env"
GOT4=$(env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" HOME=/tmp $(cat "$W/cdi.env") python3 "$C/alloc.py" 2>>"$W/client.log")
CAP4=$(field "$ADDR-0" mps_memory_limit)
check "a process with exactly the spec's environment stops at the device cap" "$([ -n "$GOT4" ] && [ "$GOT4" -le "$CAP4" ] && [ "$GOT4" -gt $((CAP4 - 1024)) ]; echo $?)" "($GOT4 MiB, cap $CAP4)"
ATTACH=$(mpsctl server-attach-isolated-device pod-cdi --host gpu-suite --model "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" 2>&1)
say "attaching a device answers with its CDI name:"
echo "$ATTACH" | block
check "the attach answer names the CDI device" "$(echo "$ATTACH" | grep -q 'yunion.io/mps-gpu='; echo $?)"
mpsctl server-detach-isolated-device pod-cdi --all >/dev/null 2>&1

say
say "## 8. Containers of two UIDs share one GPU at once (-multiuser-server)"
env $(client_env) python3 "$C/hold.py" 8 >"$W/uid0.log" 2>&1 &
U0=$!
env $(client_env) RUN_AS_UID=65534 HOME=/tmp python3 "$C/hold.py" 8 >"$W/uid65534.log" 2>&1 &
U1=$!
sleep 4
SRV=$(ctl get_server_list | head -1)
say "MPS server $SRV runs as $(ps -o user= -p "$SRV" 2>/dev/null); clients now: $(ctl get_client_list "$SRV" | tr '\n' ' ')"
wait $U0; R0=$?; wait $U1; R1=$?
say "uid 0: $(tr '\n' ' ' <"$W/uid0.log")"
say "uid 65534: $(tr '\n' ' ' <"$W/uid65534.log")"
OVERLAP=$(python3 - "$W/uid0.log" "$W/uid65534.log" <<'PY'
import sys
def span(p):
    s = f = None
    for l in open(p):
        w = l.split()
        if w and w[0] == "started": s = float(w[1])
        if w and w[0] == "finished": f = float(w[2])
    return s, f
(a0, a1), (b0, b1) = span(sys.argv[1]), span(sys.argv[2])
print(0 if None not in (a0, a1, b0, b1) and a0 < b1 and b0 < a1 else 1)
PY
)
check "both UIDs ran to the end" "$([ $R0 = 0 ] && [ $R1 = 0 ]; echo $?)"
check "their runs overlapped in time (no UID waited for the other)" "$OVERLAP"

say
say "## 9. A client cannot raise its thread share by changing the variables"
SM_ALL=$(nvidia-smi -q | grep -m1 -i "multiprocessor" | sed 's/.*: //' || true)
SM0=$(env $(client_env) python3 "$C/sms.py" 2>>"$W/client.log")
SM1=$(env $(client_env) CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 python3 "$C/sms.py" 2>>"$W/client.log")
say "SMs visible to a client: $SM0 by default (25%), $SM1 when it asks for 100%"
check "asking for 100% gives no more SMs" "$([ -n "$SM0" ] && [ "$SM1" = "$SM0" ] && [ "$SM0" -lt 100 ]; echo $?)"

say
say "## 10. One cap per virtual device: two processes of one device together past its cap"
CAPB=$(field "$ADDR-0" mps_memory_limit)
HB=$((CAPB * 6 / 10)) # each process holds 60% of the cap: two are over it
env $(client_env) YUNION_MPS_VIRTUAL_DEVICE="$UUID::1" python3 "$C/hold.py" 25 $HB >"$W/other-device.log" 2>&1 &
PC=$!
env $(client_env) YUNION_MPS_VIRTUAL_DEVICE="$UUID::0" python3 "$C/hold.py" 25 $HB >"$W/first.log" 2>&1 &
PA=$!
until_ok 60 grep -q started "$W/first.log"
sleep 2
env $(client_env) YUNION_MPS_VIRTUAL_DEVICE="$UUID::0" python3 "$C/hold.py" 25 $HB >"$W/second.log" 2>&1 &
PB=$!
wait $PB; RB=$?; wait $PA; RA=$?; wait $PC; RC=$?
say "device $UUID::0 cap $CAPB MiB; first: $(tail -1 "$W/first.log"); second: $(tail -1 "$W/second.log"); other device: $(tail -1 "$W/other-device.log")"
check "the process that pushed the device over its cap was terminated" "$([ $RB != 0 ]; echo $?)"
check "the device's other process ran on" "$([ $RA = 0 ]; echo $?)"
check "a process on another virtual device ran on undisturbed" "$([ $RC = 0 ]; echo $?)"
grep -E 'component=accounting' "$W/daemon2.log" | sed 's/^time=[^ ]* //' | block

say
say "## 11. A container's view: the pipe directory read-only, the privileged socket masked"
# Processes in a mount namespace of their own, set up as the CDI spec sets
# up a container: the GPU's pipe directory bind-mounted read-only onto
# itself, /dev/null over control_privileged. Then the same client in
# private IPC and PID namespaces too, and with an empty /dev/shm, to record
# which namespaces a container may keep private (a runtime's choice the CDI
# spec cannot make).
RO="mount --bind $PIPE $PIPE && mount -o remount,bind,ro $PIPE $PIPE"
MASK="mount --bind /dev/null $PIPE/control_privileged"
in_ns() { unshare --mount --propagation private sh -c "$1 && exec \"\$@\"" sh "${@:2}"; }
CAP11=$(field "$ADDR-0" mps_memory_limit)
capped() { [ -n "$1" ] && [ "$1" -le "$CAP11" ] && [ "$1" -gt $((CAP11 - 1024)) ]; }
BEFORE=$(ls -l --time-style=+ "$PIPE" | md5sum)
GOT=$(in_ns "$RO" env $(client_env) python3 "$C/alloc.py" 2>>"$W/client.log")
check "client with the pipe directory read-only: served and capped" "$(capped "$GOT"; echo $?)" "($GOT MiB, cap $CAP11)"
check "...and it wrote nothing in the pipe directory" "$([ "$BEFORE" = "$(ls -l --time-style=+ "$PIPE" | md5sum)" ]; echo $?)"
GOT=$(in_ns "$RO && $MASK" env $(client_env) python3 "$C/alloc.py" 2>>"$W/client.log")
check "client with control_privileged masked: served and capped" "$(capped "$GOT"; echo $?)" "($GOT MiB)"
for ns in "--ipc" "--pid --fork" "--ipc --pid --fork"; do
	echo "== unshare --mount $ns" >>"$W/client.log"
	GOT=$(unshare --mount $ns --propagation private sh -c "$RO && $MASK && exec \"\$@\"" sh env $(client_env) timeout 60 python3 "$C/alloc.py" 2>>"$W/client.log")
	say "fact: a client in private mount and ${ns% --fork} namespaces: $(capped "$GOT" && echo "served and capped" || echo "NOT served") (${GOT:-nothing} MiB; its error: $(grep -v '^==' "$W/client.log" | tail -1 | cut -c1-160))"
done
echo "== own /dev/shm" >>"$W/client.log"
GOT=$(in_ns "$RO && mount -t tmpfs tmpfs /dev/shm" env $(client_env) timeout 60 python3 "$C/alloc.py" 2>>"$W/client.log")
say "fact: a client with an empty /dev/shm of its own (mount namespace only): $(capped "$GOT" && echo "served and capped" || echo "NOT served") (${GOT:-nothing} MiB)"
PCT=$(ctl get_default_active_thread_percentage)
# Setting the value it already has: accepted or refused, nothing changes.
# The daemon moved control_privileged out of the pipe directory (issue 45),
# so root is refused without the mask too; the mask stays for a socket
# that could not be moved (/status privileged_socket_reachable).
PRIV=$(in_ns "$RO" env CUDA_MPS_PIPE_DIRECTORY="$PIPE" sh -c "echo set_default_active_thread_percentage ${PCT%.0} | timeout 10 nvidia-cuda-mps-control" 2>&1)
say "root in the namespace, pipe directory read-only, no mask: set_default_active_thread_percentage -> $(echo $PRIV)"
check "root is refused through the pipe directory without the mask (control_privileged is in the daemon's private directory)" "$(echo "$PRIV" | grep -qi "privilege"; echo $?)"
NOBODY=$(env CUDA_MPS_PIPE_DIRECTORY="$PIPE" python3 -c 'import os,subprocess; os.setgid(65534); os.setuid(65534); print(subprocess.run(["nvidia-cuda-mps-control"], input="set_default_active_thread_percentage 100\n", capture_output=True, text=True, timeout=10).stdout.strip())' 2>&1)
say "UID 65534: set_default_active_thread_percentage -> $(echo $NOBODY)"
check "UID 65534 is refused" "$(echo "$NOBODY" | grep -qi "privilege"; echo $?)"
MASKED=$(in_ns "$RO && $MASK" env CUDA_MPS_PIPE_DIRECTORY="$PIPE" sh -c "echo set_default_active_thread_percentage 100 | timeout 10 nvidia-cuda-mps-control" 2>&1)
say "root in the namespace, control_privileged masked: set_default_active_thread_percentage 100 -> $(echo $MASKED)"
check "root is refused once control_privileged is masked" "$(echo "$MASKED" | grep -qi "privilege"; echo $?)" "(default still $(ctl get_default_active_thread_percentage))"
# Last, since it would stop MPS if the mask failed: quit through the mask.
MQUIT=$(in_ns "$RO && $MASK" env CUDA_MPS_PIPE_DIRECTORY="$PIPE" sh -c "echo quit | timeout 10 nvidia-cuda-mps-control" 2>&1)
ctl get_server_list >/dev/null; check "quit through the mask is refused: MPS still runs" $? "($(echo $MQUIT))"

say
say "## 12. terminate_client on an idle and on a busy client (what accounting's enforce relies on)"
listed() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -qw "$1"; }
env $(client_env) python3 "$C/sleep.py" 2048 30 >"$W/idle.log" 2>&1 &
IDLE=$!
until_ok 60 grep -q allocated "$W/idle.log"
SRV=$(ctl get_server_list | head -1)
say "terminate_client $SRV $IDLE (idle client) -> $(ctl terminate_client "$SRV" "$IDLE")"
sleep 2
say "2 s later: process alive=$(kill -0 $IDLE 2>/dev/null && echo yes || echo no), listed by NVML=$(listed $IDLE && echo yes || echo no), in get_client_list=$(ctl get_client_list "$SRV" | grep -qw $IDLE && echo yes || echo no)"
kill -0 $IDLE 2>/dev/null; check "an idle client survives terminate_client (hence SIGTERM after a grace period)" $?
kill -TERM $IDLE; wait $IDLE
sleep 1
! listed $IDLE; check "after SIGTERM it is gone from NVML's list" $?
env $(client_env) python3 "$C/hold.py" 30 2048 >"$W/busy.log" 2>&1 &
BUSY=$!
until_ok 60 grep -q started "$W/busy.log"
SRV=$(ctl get_server_list | head -1)
say "terminate_client $SRV $BUSY (busy client) -> $(ctl terminate_client "$SRV" "$BUSY")"
T0=$(date +%s.%N)
wait $BUSY; RB=$?
GONE=1; for _ in $(seq 20); do listed $BUSY || { GONE=0; break; }; sleep 0.1; done
say "busy client: exit $RB, $(tail -1 "$W/busy.log"); gone from NVML's list $(python3 -c "print(round($(date +%s.%N)-$T0,1))") s after terminate_client"
check "a busy client dies by itself on its next CUDA call" "$([ $RB != 0 ]; echo $?)"
check "...and leaves NVML's list within 2 s" $GONE

say
say "## 13. Escapes from the per-device cap: a second process of one container past its device's cap"
# Each process is started as a container runtime applies the CDI spec: its
# own mount namespace, the spec's environment only, the pipe directory
# read-only with control_privileged masked, and the device's identity file
# bind-mounted read-only where the spec says (a tmpfs at /run/yunion-mps
# holds the mount point, as a container's own /run would). Where this host
# lets us make cgroups, each emulated container also gets a cgroup of its
# own, as a runtime gives one (the accounting's last resort for a process
# that hid its view is the other processes of its cgroup); where not, they
# share one, and a hidden process's cgroup shows two devices.
mkdir -p /run/yunion-mps
CGROOT=""
cg_try() { # cg_try ROOT ORIGINAL: can this shell move into a new cgroup under ROOT (and back)?
	mkdir -p "$1/yunion-gs-probe" 2>/dev/null && echo $$ >"$1/yunion-gs-probe/cgroup.procs" 2>/dev/null &&
		echo $$ >"$1$2/cgroup.procs" 2>/dev/null && CGROOT=$1
}
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	cg_try /sys/fs/cgroup "$(sed -n 's/^0:://p' /proc/self/cgroup)"
elif [ -d /sys/fs/cgroup/pids ]; then
	cg_try /sys/fs/cgroup/pids "$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup)"
fi
say "emulated containers' cgroups: ${CGROOT:-none (cannot be made here: the emulated containers share the cgroup of this session)}; this shell: $(tr '\n' ' ' </proc/self/cgroup)"
in_device() { # in_device DEVICE CMD...: CMD as a container given DEVICE. It
	# execs: call it in the background or in $(...), so that $! is CMD's PID.
	local dev=$1 idh idc; shift
	read -r idh idc < <(python3 "$C/cdi_identity.py" "$SPEC" "$dev")
	python3 "$C/cdi_env.py" "$SPEC" "$dev" >"$W/env-$dev"
	if [ -n "$CGROOT" ]; then
		mkdir -p "$CGROOT/yunion-gs-${dev##*::}" && echo "$BASHPID" >"$CGROOT/yunion-gs-${dev##*::}/cgroup.procs"
	fi
	exec unshare --mount --propagation private sh -c "$RO && $MASK && mount -t tmpfs -o mode=755 tmpfs /run/yunion-mps && mkdir -p \$(dirname $idc) && touch $idc && mount --bind $idh $idc && mount -o remount,bind,ro $idc && exec \"\$@\"" sh \
		env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" HOME=/tmp $(cat "$W/env-$dev") "$@"
}
CAP13=$(field "$ADDR-0" mps_memory_limit)
H=$((CAP13 * 6 / 10))
say "device $UUID::0 cap $CAP13 MiB; each process holds $H MiB (60%): two together are at 120%"
IDH=$(python3 "$C/cdi_identity.py" "$SPEC" "$UUID::0" | cut -d' ' -f1)
check "the spec mounts an identity file that names the device" "$([ "$(cat "$IDH")" = "$UUID::0" ]; echo $?)" "($IDH)"
RW=$(in_device "$UUID::0" sh -c "echo x > /run/yunion-mps/devices/$UUID 2>&1; echo rc=\$?" 2>&1 | tr '\n' ' ')
check "the identity file is read-only inside (a write fails)" "$(echo "$RW" | grep -q 'rc=[1-9]'; echo $?)" "($RW)"
HV=$(in_device "$UUID::0" unshare -Urm sh -c "mount -t tmpfs none /run/yunion-mps && ls /run/yunion-mps/devices 2>&1; echo rc=\$?" 2>&1 | tr '\n' ' ')
check "unshare -Urm and a tmpfs hide the identity file from the process's own view" "$(echo "$HV" | grep -q 'No such file'; echo $?)" "($HV)"
in_device "$UUID::1" python3 "$C/hold.py" 120 "$H" >"$W/esc-other.log" 2>&1 &
PO=$!
in_device "$UUID::0" python3 "$C/hold.py" 120 "$H" >"$W/esc-first.log" 2>&1 &
PF=$!
until_ok 60 grep -q started "$W/esc-first.log"
until_ok 60 grep -q started "$W/esc-other.log"
sleep 2
HIDE='mount -t tmpfs none /run/yunion-mps && exec "$@"'
declare -A ESC_PID ESC_RC
ESC_ROWS=("honest" "env -u YUNION_MPS_VIRTUAL_DEVICE" "YUNION_MPS_VIRTUAL_DEVICE=$UUID::3" "unshare -Urm, then a tmpfs over /run/yunion-mps")
for kind in "${ESC_ROWS[@]}"; do
	log=$W/esc-$(echo "$kind" | tr -c 'a-zA-Z0-9' _ | cut -c1-20).log
	case "$kind" in
	honest) in_device "$UUID::0" python3 "$C/hold.py" 20 "$H" >"$log" 2>&1 & ;;
	env*) in_device "$UUID::0" env -u YUNION_MPS_VIRTUAL_DEVICE python3 "$C/hold.py" 20 "$H" >"$log" 2>&1 & ;;
	YUNION*) in_device "$UUID::0" env YUNION_MPS_VIRTUAL_DEVICE="$UUID::3" python3 "$C/hold.py" 20 "$H" >"$log" 2>&1 & ;;
	unshare*) in_device "$UUID::0" unshare -Urm sh -c "$HIDE" sh python3 "$C/hold.py" 20 "$H" >"$log" 2>&1 & ;;
	esac
	p=$!
	ESC_PID[$kind]=$p
	if [ "$kind" = "YUNION_MPS_VIRTUAL_DEVICE=$UUID::3" ]; then
		# /status while it lives: the disagreement is listed there.
		mismatch_listed() { python3 -c 'import json,sys,urllib.request; a=json.load(urllib.request.urlopen(sys.argv[1], timeout=5)).get("accounting") or {}; print(json.dumps(a, indent=1)); sys.exit(0 if any(m["pid"] == int(sys.argv[2]) for m in a.get("mismatched_processes") or []) else 1)' "http://$DAEMON_ADDR/status" "$p" >"$W/status13.json" 2>/dev/null; }
		until_ok 15 mismatch_listed; LISTED=$?
	fi
	wait $p; ESC_RC[$kind]=$?
	say "second process, $kind (PID $p): exit ${ESC_RC[$kind]}, $(tail -1 "$log")"
	sleep 1
done
kill -0 $PF 2>/dev/null; FIRST_ALIVE=$?
kill -0 $PO 2>/dev/null; OTHER_ALIVE=$?
kill -TERM $PF $PO 2>/dev/null; wait $PF; wait $PO
say
say "| second process of the container given $UUID::0 (each 60% of the cap, beside the first's 60%) | exit | terminated | billed | the first process |"
say "|---|---|---|---|---|"
for kind in "${ESC_ROWS[@]}"; do
	p=${ESC_PID[$kind]}
	how=$(grep -E "component=accounting.*pid=$p( |$)" "$W/daemon2.log" | grep -oE 'source=[a-z]+|cause=[a-z_]+' | sort -u | tr '\n' ' ')
	say "| $kind | ${ESC_RC[$kind]} | $([ "${ESC_RC[$kind]}" != 0 ] && echo yes || echo '**no**') | ${how:-by its identity file} | $([ $FIRST_ALIVE = 0 ] && echo untouched || echo '**gone**') |"
done
say
for kind in "${ESC_ROWS[@]}"; do
	p=${ESC_PID[$kind]}
	check "second process ($kind) pushing $UUID::0 past its cap was terminated" "$([ "${ESC_RC[$kind]}" != 0 ]; echo $?)"
	grep -qE "accounting: terminating .*pid=$p " "$W/daemon2.log"; check "...by the daemon (PID $p)" $?
done
p=${ESC_PID[unshare -Urm, then a tmpfs over /run/yunion-mps]}
grep -qE "(terminating client over its device's cap.*device=$UUID::0.*pid=$p |terminating container client without a device.*pid=$p .*cause=no_device)" "$W/daemon2.log"
check "the hidden process was billed to $UUID::0 by its cgroup, or, where the cgroup cannot tell, terminated as a container client without a device" $?
check "/status listed the renamed one as billed to $UUID::0 against its environment while it ran" $LISTED
check "the container's first process ran on untouched" "$([ $FIRST_ALIVE = 0 ] && ! grep -q "accounting: terminating.*pid=$PF " "$W/daemon2.log"; echo $?)"
check "the other device's process ran on untouched" "$([ $OTHER_ALIVE = 0 ] && ! grep -q "accounting: terminating.*pid=$PO " "$W/daemon2.log"; echo $?)"
grep -E "component=accounting.*pid=($(IFS='|'; echo "${ESC_PID[*]}")|$PO|$PF) " "$W/daemon2.log" | sed 's/^time=[^ ]* //' | block
say "accounting in /status while the renamed one ran:"
block <"$W/status13.json"
rmdir /run/yunion-mps 2>/dev/null
[ -n "$CGROOT" ] && rmdir "$CGROOT"/yunion-gs-* 2>/dev/null

say
say "## 14. Per-device QoS (mps_qos): latency and batch slices, and a batch client that escapes"
# Slice 0 latency, 1-3 batch, under auto (no cap at N=4): the latency
# slice gets the even share, 25%, priority 0 (issue 23); the batch slices
# (100 - 8) / 3 = 30% and priority 1; the control daemon the largest, 30%,
# and 1. reserve 8, the default, is written out.
sed -i 's/^mps_thread_percentage: .*/mps_thread_percentage: auto/' "$W/host.conf"
printf 'devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: 4\n  mps_qos:\n    latency: [0]\n    reserve: 8\n' >"$W/devices.yml.new"
mv "$W/devices.yml.new" "$W/devices.yml"
qos_rows() { is "$ADDR-0" mps_thread_percentage 25 && is "$ADDR-1" mps_thread_percentage 30 && is "$ADDR-3" mps_thread_percentage 30; }
until_ok 30 qos_rows; check "inventory rows: slice 0 at 25%, slices 1-3 at 30%" $?
"$B/mps-daemon" --config "$W/host.conf" check-config 2>&1 | block
PRIO=$(ctl get_default_client_priority); PCT14=$(ctl get_default_active_thread_percentage)
check "the control daemon holds client priority 1 and 30% (the batch share, the largest)" "$([ "$PRIO" = 1 ] && [ "$PCT14" = 30.0 ]; echo $?)" "(priority $PRIO, $PCT14%)"
for d in 0 1; do say "spec environment of $UUID::$d: $(python3 "$C/cdi_env.py" "$SPEC" "$UUID::$d" | grep -E 'THREAD|PRIORITY' | tr '\n' ' ')"; done
# Each environment read whole first: grep -q stops reading at its match,
# and under pipefail the writer's broken pipe would fail the check.
ENV1=$(python3 "$C/cdi_env.py" "$SPEC" "$UUID::1"); ENV0=$(python3 "$C/cdi_env.py" "$SPEC" "$UUID::0")
grep -qx CUDA_MPS_CLIENT_PRIORITY=1 <<<"$ENV1" && grep -qx CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 <<<"$ENV1"
check "a batch device's spec entry carries 30% and priority 1" $?
grep -qx CUDA_MPS_CLIENT_PRIORITY=0 <<<"$ENV0" && grep -qx CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 <<<"$ENV0"
check "the latency device's carries 25% and priority 0" $?
mkdir -p /run/yunion-mps
SML=$(in_device "$UUID::0" python3 "$C/sms.py" 2>>"$W/client.log")
SMB=$(in_device "$UUID::1" python3 "$C/sms.py" 2>>"$W/client.log")
SMU=$(in_device "$UUID::1" env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE python3 "$C/sms.py" 2>>"$W/client.log")
say "SMs: latency device $SML, batch device $SMB, batch device without its variable $SMU"
check "the latency device's client gets fewer SMs than a batch device's (25% against 30%)" "$([ -n "$SMB" ] && [ -n "$SML" ] && [ "$SML" -lt "$SMB" ]; echo $?)"
check "...and a batch client that drops CUDA_MPS_ACTIVE_THREAD_PERCENTAGE still gets its share (the control daemon's default holds it)" "$([ -n "$SMU" ] && [ "$SMU" = "$SMB" ]; echo $?)"
in_device "$UUID::1" python3 "$C/hold.py" 25 >"$W/qos-batch.log" 2>&1 &
PQB=$!
in_device "$UUID::0" env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u CUDA_MPS_CLIENT_PRIORITY python3 "$C/hold.py" 25 >"$W/qos-latency.log" 2>&1 &
PQL=$!
until_ok 60 grep -q started "$W/qos-batch.log"
in_device "$UUID::2" env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_MPS_CLIENT_PRIORITY=0 python3 "$C/hold.py" 20 >"$W/qos-escape.log" 2>&1 &
PQE=$!
# Listed while it runs (qos_escapes) or, killed as it connected (issue 39),
# among the terminations, as a QoS escape.
escape_listed() { python3 -c 'import json,sys,urllib.request; a=json.load(urllib.request.urlopen(sys.argv[1], timeout=5)).get("accounting") or {}; pid=int(sys.argv[2]); mine=[e for e in a.get("qos_escapes") or [] if e["pid"] == pid]+[t for t in a.get("terminations") or [] if t["pid"] == pid and t["cause"] == "qos_escape"]; print(json.dumps(mine, indent=1)); sys.exit(0 if mine else 1)' "http://$DAEMON_ADDR/status" "$PQE" >"$W/status14.json" 2>/dev/null; }
until_ok 15 escape_listed; LISTED14=$?
wait $PQE; RQE=$?
say "batch client without its share and at priority 0 (PID $PQE): exit $RQE, $(tail -1 "$W/qos-escape.log")"
check "it was listed as a QoS escape in /status (an escape, or a termination for one)" $LISTED14
check "it was terminated" "$([ $RQE != 0 ]; echo $?)"
grep -qE "(terminating|signalled) client escaping its device's QoS.*device=$UUID::2.*pid=$PQE " "$W/daemon2.log"; check "the daemon's log says why" $?
wait $PQB; RQB=$?; wait $PQL; RQL=$?
check "the batch client with its device's environment ran on" "$([ $RQB = 0 ]; echo $?)" "($(tail -1 "$W/qos-batch.log"))"
check "the latency device's client without any QoS variable ran on" "$([ $RQL = 0 ]; echo $?)" "($(tail -1 "$W/qos-latency.log"))"
block <"$W/status14.json"
grep -E "component=accounting.*pid=($PQE|$PQB|$PQL) |client priority" "$W/daemon2.log" | sed 's/^time=[^ ]* //' | block
rmdir /run/yunion-mps 2>/dev/null

say
say "## 15. The single pipe layout (Cloudpods' pods: CUDA_MPS_PIPE_DIRECTORY=<root>)"
# The per-GPU daemon of the sections above goes first: one MPS server per GPU.
kill -TERM $DPID; wait $DPID
ctl quit >/dev/null
ROOT1=$W/pipe1
sed -e "s|^cuda_mps_pipe_directory: .*|cuda_mps_pipe_directory: $ROOT1|" \
	-e "s|^cuda_mps_log_directory: .*|cuda_mps_log_directory: $W/log1|" "$W/host.conf" >"$W/host1.conf"
echo "mps_pipe_layout: single" >>"$W/host1.conf"
set_vn 4
"$B/mps-daemon" --config "$W/host1.conf" --log-level debug 2>"$W/daemon-single.log" &
DPID=$!; PIDS+=($DPID)
wait_ready; check "daemon ready in the single layout" $?
ctl1() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$(priv_dir "$ROOT1") timeout 10 nvidia-cuda-mps-control 2>&1; }
[ -S "$ROOT1/control" ] && [ ! -e "$ROOT1/$UUID" ]
check "one control daemon in the pipe root itself, no per-GPU directory" $? "($(ls "$ROOT1" | tr '\n' ' '))"
check "its device list is the GPU's UUID" "$([ "$(cat "$ROOT1/yunion-mps-devices" 2>/dev/null)" = "$UUID" ]; echo $?)" "($(cat "$ROOT1/yunion-mps-devices" 2>/dev/null))"
say "ps of the control daemon: $(ps -o pid=,args= -C nvidia-cuda-mps-control | tr '\n' ';')"
say "CUDA_VISIBLE_DEVICES of the control daemon: $(tr '\0' '\n' </proc/$(pgrep -f "nvidia-cuda-mps-control -d" -n)/environ 2>/dev/null | grep ^CUDA_VISIBLE_DEVICES)"
CAP1=$(field "$ADDR-0" mps_memory_limit)
say "limits read back (device 0 = $UUID): $(ctl1 get_default_device_pinned_mem_limit 0), threads $(ctl1 get_default_active_thread_percentage)"
# A pod as Cloudpods' host agent starts it: the pipe root, the GPU by UUID.
GOT1=$(CUDA_MPS_PIPE_DIRECTORY=$ROOT1 CUDA_VISIBLE_DEVICES=$UUID python3 "$C/alloc.py" 2>>"$W/client-single.log")
check "a client given CUDA_MPS_PIPE_DIRECTORY=<root> stops at the GPU's cap" "$([ -n "$GOT1" ] && [ "$GOT1" -le "$CAP1" ] && [ "$GOT1" -gt $((CAP1 - 1024)) ]; echo $?)" "($GOT1 MiB, cap $CAP1)"
GOT2=$(CUDA_MPS_PIPE_DIRECTORY=$ROOT1 python3 "$C/alloc.py" 2>>"$W/client-single.log")
if [ "$(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l)" = 1 ]; then
	check "...and without CUDA_VISIBLE_DEVICES too" "$([ -n "$GOT2" ] && [ "$GOT2" -le "$CAP1" ]; echo $?)" "($GOT2 MiB)"
else
	# On a host of several GPUs PyTorch counts them through NVML (all of
	# them) while CUDA, through this daemon, sees one: it fails at init
	# (seen on 2 H200s; docs/containers.md, "Several GPUs on one host").
	say "fact: a PyTorch client without CUDA_VISIBLE_DEVICES on this host of several GPUs: ${GOT2:-nothing} MiB ($(grep -o 'INTERNAL ASSERT FAILED.*num_gpus=[0-9]*' "$W/client-single.log" | tail -1))"
fi
kill -TERM $DPID; wait $DPID
# The daemon left MPS running (as on every stop); adopted again by a new one:
"$B/mps-daemon" --config "$W/host1.conf" --log-level debug 2>"$W/daemon-single2.log" &
DPID=$!; PIDS+=($DPID)
wait_ready; check "a restarted daemon adopts the single control daemon" "$(grep -q 'started MPS control daemon' "$W/daemon-single2.log"; [ $? = 1 ]; echo $?)"
kill -TERM $DPID; wait $DPID
ctl1 quit >/dev/null
DPID=$$ # nothing left to stop below

[ -n "$CGROOT" ] && rmdir "$CGROOT"/yunion-gs-* 2>/dev/null

say
say "## 16. QoS against 100/N, what costs the victim in the daemon's set-up, what the control offers (issue 23)"
# tests/gpu/qos23.py: about 3 minutes; GPU_QOS23=0 skips it.
T16=$(date +%s)
# What is left of the suite's budget, less a margin for the rest.
LEFT=$((${GPU_BUDGET_S:-480} - 20 - (T16 - T_START)))
if [ "${GPU_QOS23:-1}" = 1 ] && [ $LEFT -lt 150 ]; then
	say "(skipped: $LEFT s left of the suite's ${GPU_BUDGET_S:-480} s, it needs about 3 minutes; run tests/gpu/qos23.py alone)"
elif [ "${GPU_QOS23:-1}" = 1 ]; then
	say "(${LEFT} s left for it)"
	OUT="$OUT" timeout -k 30 $LEFT python3 "$HERE/qos23.py" >"$W/qos23.log" 2>&1
	R16=$?
	if [ -s "$OUT/qos23.md" ]; then sed 's/^# /### /' "$OUT/qos23.md" >>"$REPORT"; fi
	check "the QoS run finished" $R16 "(in $(( $(date +%s) - T16 )) s; its log: logs.tgz qos23.log)"
fi

say
CM_AFTER=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
check "compute mode untouched" "$([ "$CM_BEFORE" = "$CM_AFTER" ]; echo $?)" "($CM_BEFORE -> $CM_AFTER)"
[ "$DPID" = $$ ] || { kill -TERM $DPID; wait $DPID; }
say
say "suite time: $(( $(date +%s) - T_START )) s"
if [ $FAIL = 0 ]; then say "RESULT: all checks passed"; else say "RESULT: FAILURES above"; fi
exit $FAIL
