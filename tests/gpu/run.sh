#!/usr/bin/env bash
# The GPU suite: one `device` call runs it end to end on a real NVIDIA host.
#   make gpu-bundle            (here: builds .gpu-bundle/, the GPU host has no Go)
#   device run: bash tests/gpu/run.sh   with carry [".gpu-bundle"]
# It never changes the card's settings: the daemon runs with
# mps_set_exclusive_compute_mode: false, and MPS gets its own pipe and log
# directories. Results go to $OUT/gpu-suite.md (copied into docs/ by hand).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-suite-out}; mkdir -p "$OUT"
B=$(cd "$(dirname "$0")/../.." && pwd)/.gpu-bundle
REPORT=$OUT/gpu-suite.md
W=$(mktemp -d /tmp/gs.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
cleanup() {
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 1
	for d in "$W"/pipe/*/; do [ -S "$d/control" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 nvidia-cuda-mps-control; done
	cp "$W"/*.log "$OUT/" 2>/dev/null
}
trap cleanup EXIT
say() { echo "$*" | tee -a "$REPORT"; }
check() { # check NAME CONDITION-RESULT(0/1) DETAIL
	if [ "$2" = 0 ]; then say "- PASS: $1 ${3:-}"; else say "- FAIL: $1 ${3:-}"; FAIL=1; fi
}
block() { say '```'; tee -a "$REPORT"; say '```'; }
# http_ok URL: 0 when URL answers 200 (python3 is on every GPU image; curl may not be).
http_ok() { python3 -c 'import sys,urllib.request; sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)' "$1" >/dev/null 2>&1; }

UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
: >"$REPORT"
say "# GPU suite: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say
nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block
say
say "## 1. MPS contract: the simulated control's assertions against the real nvidia-cuda-mps-control"
MPS_CONTRACT_REAL=1 MPS_CONTROL_BINARY=$(command -v nvidia-cuda-mps-control) MPS_CONTRACT_GPU=$UUID \
	"$B/mps.test" -test.run 'Contract' -test.v -test.count=1 2>&1 | grep -E '^(--- |    --- |PASS|FAIL|ok)' | block
check "contract test (real and simulated control answer alike)" "${PIPESTATUS[0]}"

say
say "## 2. The daemon on the real GPU, virtual_number 4, compute mode untouched"
"$B/mps-inventory" --listen 127.0.0.1:0 --db "$W/inventory.db" --address-file "$W/inv.addr" 2>"$W/inventory.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/inv.addr" ] && break; sleep 0.1; done
URL=http://$(cat "$W/inv.addr")
cat >"$W/host.conf" <<CONF
enable_cuda_mps: true
container_device_config_file: $W/devices.yml
cuda_mps_pipe_directory: $W/pipe
cuda_mps_log_directory: $W/log
mps_inventory_url: $URL
mps_listen_address: 127.0.0.1:19331
mps_state_directory: $W/state
mps_set_exclusive_compute_mode: false
mps_host_name: gpu-suite
CONF
cat >"$W/devices.yml" <<YML
devices:
- path: /dev/nvidia0
  type: NVIDIA_MPS
  virtual_number: 4
YML
say "check-config with the GPU named as /dev/nvidia0:"
"$B/mps-daemon" --config "$W/host.conf" check-config 2>&1 | block
for p in "$BUS" "$(echo "$BUS" | tr 'A-F' 'a-f' | sed 's/^0000//')" "$UUID"; do
	sed -i "s|^- path: .*|- path: \"$p\"|" "$W/devices.yml"
	"$B/mps-daemon" --config "$W/host.conf" check-config >/dev/null 2>&1
	check "check-config resolves path $p" $?
done
sed -i "s|^- path: .*|- path: /dev/nvidia0|" "$W/devices.yml"

T0=$(date +%s.%N)
"$B/mps-daemon" --config "$W/host.conf" --log-level debug 2>"$W/daemon.log" &
DPID=$!; PIDS+=($DPID)
READY=1
for _ in $(seq 300); do http_ok http://127.0.0.1:19331/readyz && { READY=0; break; }; sleep 0.1; done
T1=$(date +%s.%N)
check "daemon ready (devices registered with enforced caps)" $READY "in $(python3 -c "print(round($T1-$T0,2))") s"
say "climc isolated-device-list:"
MPS_INVENTORY_URL=$URL "$B/climc" isolated-device-list 2>&1 | block
CAP=$(MPS_INVENTORY_URL=$URL "$B/climc" -o json isolated-device-list | python3 -c 'import json,sys; d=json.load(sys.stdin)["isolated_devices"]; print(d[0]["mps_memory_limit"])')
N=$(MPS_INVENTORY_URL=$URL "$B/climc" -o json isolated-device-list | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
check "4 virtual devices registered" "$([ "$N" = 4 ]; echo $?)" "(total $N, cap $CAP MiB each)"
PIPE=$W/pipe/$UUID
say "limits read back from the control daemon ($PIPE):"
for c in get_default_device_pinned_mem_limit\ 0 get_default_active_thread_percentage; do
	echo "$c -> $(echo "$c" | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 10 nvidia-cuda-mps-control)"
done | block

say
say "## 3. A CUDA client given a virtual device's environment cannot allocate past its cap"
cat >"$W/alloc.py" <<'PY'
import torch, sys
n = 0; bufs = []
try:
    while True:
        bufs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda")); n += 256
except RuntimeError as e:
    pass
print(n)
PY
GOT=$(CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$W/log/$UUID CUDA_VISIBLE_DEVICES=$UUID python3 "$W/alloc.py" 2>>"$W/client.log")
say "client allocated $GOT MiB in 256 MiB blocks; cap $CAP MiB"
check "allocation stopped at the cap" "$([ -n "$GOT" ] && [ "$GOT" -le "$CAP" ] && [ "$GOT" -gt $((CAP - 1024)) ]; echo $?)" "($GOT <= $CAP, within 1 GiB)"
GOT2=$(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=200G CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_VISIBLE_DEVICES=$UUID python3 "$W/alloc.py" 2>>"$W/client.log")
check "a client asking for more (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=200G) still stops at the cap" "$([ -n "$GOT2" ] && [ "$GOT2" -le "$CAP" ]; echo $?)" "($GOT2 MiB)"

say
say "## 4. Restart adopts, stop leaves MPS running, compute mode untouched"
kill -TERM $DPID; wait $DPID; check "daemon exits 0 on SIGTERM" $?
echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
check "MPS control daemon still running after the daemon stopped" $?
"$B/mps-daemon" --config "$W/host.conf" --log-level debug 2>"$W/daemon2.log" &
DPID=$!; PIDS+=($DPID)
for _ in $(seq 300); do http_ok http://127.0.0.1:19331/readyz && break; sleep 0.1; done
N2=$(MPS_INVENTORY_URL=$URL "$B/climc" -o json isolated-device-list | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
check "restart: still 4 devices, no duplicates" "$([ "$N2" = 4 ]; echo $?)"
! grep -q "started MPS control daemon" "$W/daemon2.log"; check "restart adopted the control daemon" $?
CM_AFTER=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
check "compute mode untouched" "$([ "$CM_BEFORE" = "$CM_AFTER" ]; echo $?)" "($CM_BEFORE -> $CM_AFTER)"
kill -TERM $DPID; wait $DPID

say
if [ $FAIL = 0 ]; then say "RESULT: all checks passed"; else say "RESULT: FAILURES above"; fi
exit $FAIL
