#!/usr/bin/env bash
# Records what nvidia-cuda-mps-control really prints, command by command, so the
# simulated control in pkg/mps answers the same way. Runs on a GPU host as root;
# never changes the card's settings (no compute-mode change).
set -u
OUT=${OUT:-/tmp/mps-probe-out}; mkdir -p "$OUT"
R=$(mktemp -d /tmp/mpsprobe.XXXX); P=$R/p; L=$R/l; mkdir -p $P $L; chmod 755 $R $P $L
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
export CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L CUDA_VISIBLE_DEVICES=$UUID
c() { printf '### %s\n' "$*"; printf '%s\n' "$*" | timeout 10 nvidia-cuda-mps-control >/tmp/o 2>/tmp/e; rc=$?; echo "rc=$rc"; echo "--stdout"; cat -A /tmp/o; echo "--stderr"; cat -A /tmp/e; }
{
echo "## env"; date -u; nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,compute_mode,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
which nvidia-cuda-mps-control; ls -l /dev/nvidia* ; ls /dev/dri 2>&1; 
B=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr A-F a-f | sed 's/^0000//'); echo "sysfs bus $B"; ls -l /sys/bus/pci/devices/$B/ 2>&1 | head -5; cat /sys/bus/pci/devices/$B/numa_node 2>&1; ls -l /sys/class/drm 2>&1 | head
echo "## no daemon yet"
c get_server_list
echo "## start daemon"; nvidia-cuda-mps-control -d; echo "start rc=$?"; sleep 1; ls -la $P $L
c get_server_list
c get_default_active_thread_percentage
c get_default_device_pinned_mem_limit 0
c set_default_active_thread_percentage 25
c get_default_active_thread_percentage
c set_default_active_thread_percentage 33.5
c get_default_active_thread_percentage
c set_default_active_thread_percentage 25
c set_default_device_pinned_mem_limit 0 20389M
c get_default_device_pinned_mem_limit 0
c set_default_device_pinned_mem_limit 0 8G
c get_default_device_pinned_mem_limit 0
c get_default_device_pinned_mem_limit 3
c set_default_device_pinned_mem_limit 0 abc
c set_default_active_thread_percentage 150
c set_default_active_thread_percentage 0
c nosuchcommand
c get_server_status
c get_device_client_list
c ps
echo "## client"
python3 - <<'PY' &
import torch, time
x = torch.empty(1<<30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()
print("client up", flush=True); time.sleep(8)
PY
CP=$!; sleep 5
c get_server_list
S=$(printf 'get_server_list\n' | nvidia-cuda-mps-control | head -1)
echo "server pid=$S"
c get_server_status $S
c get_client_list $S
c get_device_client_list $S
c get_device_client_list
c ps
c get_active_thread_percentage $S
c get_device_pinned_mem_limit $S 0
c set_device_pinned_mem_limit $S 0 4G
c get_device_pinned_mem_limit $S 0
c set_active_thread_percentage $S 50
c get_active_thread_percentage $S
c get_server_status 999999
c terminate_client $S 999999
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
wait $CP
sleep 1
c get_server_list
c shutdown_server $S
c get_server_list
c quit
sleep 1
c get_server_list
ls -la $P $L; echo "## control.log"; cat $L/control.log; echo "## server.log"; cat $L/server.log 2>/dev/null | tail -20
} > "$OUT/mps-probe.txt" 2>&1
echo done
