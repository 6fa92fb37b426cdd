#!/usr/bin/env bash
# The multi-GPU proof (issue 17), on a host with two or more NVIDIA GPUs:
#   make gpu-bundle
#   device run (a kind with 2+ GPUs): bash tests/gpu/multi.sh   with carry [".gpu-bundle"]
# Results go to $OUT/gpu-multi.md (copied into docs/gpu-results.md by hand).
# Like run.sh it never changes the card's settings (compute mode untouched)
# and gives MPS its own pipe and log roots. The first two GPUs are used:
# GPU A with virtual_number 2, GPU B with 4.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-multi-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/../../.gpu-bundle
C=$HERE/clients
REPORT=$OUT/gpu-multi.md
W=$(mktemp -d /tmp/gm.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19341
. "$HERE/lib.sh"
: >"$REPORT"
say "# Multi-GPU suite: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_mode --format=csv | block
mapfile -t UU < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
mapfile -t BB < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader)
if [ "${#UU[@]}" -lt 2 ]; then say "RESULT: needs two GPUs, found ${#UU[@]}"; exit 2; fi
UA=${UU[0]} UB=${UU[1]}
AA=$(echo "${BB[0]}" | tr 'A-F' 'a-f' | sed 's/^[0-9a-f]*://') AB=$(echo "${BB[1]}" | tr 'A-F' 'a-f' | sed 's/^[0-9a-f]*://')
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
say "CUDA's own order (CUDA_DEVICE_ORDER unset) of the GPUs: $(python3 -c 'import torch; print([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])' 2>&1)"

"$B/mps-inventory" --listen 127.0.0.1:0 --db "$W/inventory.db" --address-file "$W/inv.addr" --admin-token-file "$W/admin.token" 2>"$W/inventory.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/inv.addr" ] && [ -s "$W/admin.token" ] && break; sleep 0.1; done
URL=http://$(cat "$W/inv.addr"); TOKEN=$(cat "$W/admin.token")
write_conf() { # write_conf FILE PIPE_ROOT LOG_ROOT [extra lines]
	cat >"$1" <<CONF
enable_cuda_mps: true
container_device_config_file: $W/devices.yml
cuda_mps_pipe_directory: $2
cuda_mps_log_directory: $3
mps_inventory_url: $URL
mps_inventory_token_file: $W/admin.token
mps_listen_address: $DAEMON_ADDR
mps_state_directory: $W/state
mps_cdi_directory: $W/cdi
mps_thread_percentage: even
mps_set_exclusive_compute_mode: false
mps_host_name: gpu-multi
mps_sync_interval: 2s
mps_health_interval: 1s
${4:-}
CONF
}
set_two() { # set_two NA NB
	printf 'devices:\n- path: "%s"\n  type: NVIDIA_MPS\n  virtual_number: %s\n- path: "%s"\n  type: NVIDIA_MPS\n  virtual_number: %s\n' "$UA" "$1" "$UB" "$2" >"$W/devices.yml.new"
	mv "$W/devices.yml.new" "$W/devices.yml"
}
ctlp() { local p=$1; shift; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$p timeout 10 nvidia-cuda-mps-control 2>&1; }
alloc_on() { # alloc_on PIPE UUID: MiB a client on that GPU got
	CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_VISIBLE_DEVICES=$2 python3 "$C/alloc.py" 2>>"$W/clients.log"
}
within() { [ -n "$1" ] && [ "$1" -le "$2" ] && [ "$1" -gt $(($2 - 1024)) ]; }

say
say "## 1. Per-GPU layout: A with 2 devices, B with 4; each GPU's daemon, caps and rows its own"
write_conf "$W/host.conf" "$W/pipe" "$W/log"
set_two 2 4
start_daemon "$W/daemon.log"
wait_ready; check "daemon ready" $?
mpsctl isolated-device-list 2>&1 | block
CA=$(field "$AA-0" mps_memory_limit) CB=$(field "$AB-0" mps_memory_limit)
check "6 rows: 2 on A, 4 on B" "$([ "$(count)" = 6 ] && [ -n "$(field "$AA-1" id)" ] && [ -n "$(field "$AB-3" id)" ] && gone "$AA-2"; echo $?)"
for g in A B; do
	u=$([ $g = A ] && echo "$UA" || echo "$UB")
	say "GPU $g ($u) control daemon: pinned $(ctlp "$W/pipe/$u" get_default_device_pinned_mem_limit 0), threads $(ctlp "$W/pipe/$u" get_default_active_thread_percentage)"
done
check "per-GPU thread share: A 50%, B 25%" "$([ "$(ctlp "$W/pipe/$UA" get_default_active_thread_percentage)" = 50.0 ] && [ "$(ctlp "$W/pipe/$UB" get_default_active_thread_percentage)" = 25.0 ]; echo $?)"
GA=$(alloc_on "$W/pipe/$UA" "$UA") GB=$(alloc_on "$W/pipe/$UB" "$UB")
within "$GA" "$CA"; check "a client of A stops at A's cap" $? "($GA MiB, cap $CA)"
within "$GB" "$CB"; check "a client of B stops at B's cap" $? "($GB MiB, cap $CB)"
grep -h "cdi\|name:" "$W"/cdi/*.yaml 2>/dev/null | grep -c "name:" | { read -r n; check "CDI entries for both GPUs' devices" "$([ "${n:-0}" -ge 6 ]; echo $?)" "($n names)"; }

say
say "## 2. A faulting client on A leaves B's running client untouched"
CUDA_MPS_PIPE_DIRECTORY=$W/pipe/$UB CUDA_VISIBLE_DEVICES=$UB python3 "$C/hold.py" 30 1024 >"$W/b-victim.log" 2>&1 &
VB=$!
until_ok 60 grep -q started "$W/b-victim.log"
CUDA_MPS_PIPE_DIRECTORY=$W/pipe/$UA CUDA_VISIBLE_DEVICES=$UA python3 "$C/fault.py" 6 >"$W/a-fault.log" 2>&1 &
FA=$!
until_ok 30 is "$AA-0" unhealthy True; check "A's devices unhealthy while its server is in FAULT" $?
is "$AB-0" unhealthy False; check "B's devices stay healthy" $?
wait $FA
until_ok 30 is "$AA-0" unhealthy False; check "A's devices healthy again" $?
wait $VB; RB=$?
check "B's client ran to its end" "$([ $RB = 0 ] && grep -q finished "$W/b-victim.log"; echo $?)" "($(tail -1 "$W/b-victim.log"))"

say
say "## 3. A live resize of A (2 -> 3) leaves B's server, client and rows untouched"
CUDA_MPS_PIPE_DIRECTORY=$W/pipe/$UB CUDA_VISIBLE_DEVICES=$UB python3 "$C/hold.py" 20 1024 >"$W/b-during-resize.log" 2>&1 &
VB=$!
until_ok 60 grep -q started "$W/b-during-resize.log"
SB=$(ctlp "$W/pipe/$UB" get_server_list | head -1)
IDS_B=$(devices | grep -F "\"$AB-" | python3 -c 'import json,sys; print(sorted(json.loads(l)["id"] for l in sys.stdin))')
set_two 3 4
until_ok 30 test -n "$(field "$AA-2" id)"; check "A resized to 3" $?
check "B's MPS server is the same" "$([ "$(ctlp "$W/pipe/$UB" get_server_list | head -1)" = "$SB" ]; echo $?)" "($SB)"
check "B's rows are the same" "$([ "$(devices | grep -F "\"$AB-" | python3 -c 'import json,sys; print(sorted(json.loads(l)["id"] for l in sys.stdin))')" = "$IDS_B" ]; echo $?)"
wait $VB; check "B's client ran to its end" "$(grep -q finished "$W/b-during-resize.log"; echo $?)"
kill -TERM $DPID; wait $DPID
for u in "$UA" "$UB"; do ctlp "$W/pipe/$u" quit >/dev/null; done

say
say "## 4. Single layout (Cloudpods' pods): one daemon for both GPUs, each client capped at its GPU's cap"
say "The daemon starts nvidia-cuda-mps-control with CUDA_VISIBLE_DEVICES=<A>,<B> (PCI order); CUDA_DEVICE_ORDER is left unset."
write_conf "$W/host1.conf" "$W/pipe1" "$W/log1" "mps_pipe_layout: single"
set_two 2 4
"$B/mps-daemon" --config "$W/host1.conf" --log-level debug 2>"$W/daemon-single.log" &
DPID=$!; PIDS+=($DPID)
wait_ready; check "daemon ready in the single layout" $?
say "device list: $(cat "$W/pipe1/yunion-mps-devices" 2>/dev/null)"
say "limits: ordinal 0 $(ctlp "$W/pipe1" get_default_device_pinned_mem_limit 0), ordinal 1 $(ctlp "$W/pipe1" get_default_device_pinned_mem_limit 1), threads $(ctlp "$W/pipe1" get_default_active_thread_percentage)"
CA=$(field "$AA-0" mps_memory_limit) CB=$(field "$AB-0" mps_memory_limit)
GA=$(alloc_on "$W/pipe1" "$UA") GB=$(alloc_on "$W/pipe1" "$UB")
within "$GA" "$CA"; check "a client pinned to A (CUDA_VISIBLE_DEVICES=$UA) stops at A's cap" $? "($GA MiB, cap $CA)"
within "$GB" "$CB"; check "a client pinned to B (CUDA_VISIBLE_DEVICES=$UB) stops at B's cap" $? "($GB MiB, cap $CB)"
check "the two caps differ (the test can tell them apart)" "$([ "$CA" != "$CB" ]; echo $?)"
kill -TERM $DPID; wait $DPID
ctlp "$W/pipe1" quit >/dev/null

say
CM_AFTER=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
check "compute modes untouched" "$([ "$CM_BEFORE" = "$CM_AFTER" ]; echo $?)" "($CM_BEFORE -> $CM_AFTER)"
if [ $FAIL = 0 ]; then say "RESULT: all checks passed"; else say "RESULT: FAILURES above"; fi
exit $FAIL
