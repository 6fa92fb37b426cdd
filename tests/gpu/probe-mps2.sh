#!/usr/bin/env bash
# Second probe: how pinned-memory limits read back and are enforced, and what
# the per-server commands print while a client runs. Never changes card settings.
set -u
OUT=${OUT:-/tmp/mps-probe-out}; mkdir -p "$OUT"
R=$(mktemp -d /tmp/mpsprobe.XXXX); P=$R/p; L=$R/l; mkdir -p $P $L; chmod 755 $R $P $L
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
export CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L CUDA_VISIBLE_DEVICES=$UUID
c() { printf '### %s\n' "$*"; printf '%s\n' "$*" | timeout 10 nvidia-cuda-mps-control >/tmp/o 2>/tmp/e; rc=$?; echo "rc=$rc"; echo "--stdout"; cat -A /tmp/o; echo "--stderr"; cat -A /tmp/e; }
{
nvidia-cuda-mps-control -d; sleep 0.5
for v in 512M 1023M 1024M 1536M 2047M 2048M 20389M 35942M 1G 2g 1T 0.5G 0 100K 1048576K; do c set_default_device_pinned_mem_limit 0 $v; c get_default_device_pinned_mem_limit 0; done
c set_default_device_pinned_mem_limit 0 abc
c get_default_device_pinned_mem_limit 0
echo "## two commands in one session"
printf 'get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\nget_server_list\n' | timeout 10 nvidia-cuda-mps-control | cat -A; echo "rc=$?"
c set_default_active_thread_percentage 25
c set_default_device_pinned_mem_limit 0 20389M
echo "## client allocating 256 MiB chunks"
cat > /tmp/alloc.py <<'PY'
import torch, time, sys
bufs=[]; n=0
try:
    while True:
        bufs.append(torch.empty(256<<20, dtype=torch.uint8, device='cuda')); n+=256
except RuntimeError as e:
    print("alloc stopped at MiB", n, "err:", str(e).splitlines()[0][:160], flush=True)
f,t = torch.cuda.mem_get_info(); print("mem_get_info free MiB", f>>20, "total MiB", t>>20, flush=True)
print("client up", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv)>1 else 10)
PY
python3 /tmp/alloc.py 12 > /tmp/client.out 2>&1 &
CP=$!
for i in $(seq 1 60); do S=$(printf 'get_server_list\n' | nvidia-cuda-mps-control 2>/dev/null | head -1); grep -q "client up" /tmp/client.out && [ -n "$S" ] && break; sleep 0.5; done
cat /tmp/client.out; echo "server pid=$S client pid=$CP"
c get_server_list
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
c set_active_thread_percentage $S 150
c get_active_thread_percentage $S
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
python3 - <<'PY'
import pynvml as n
n.nvmlInit(); h=n.nvmlDeviceGetHandleByIndex(0)
print("minor", n.nvmlDeviceGetMinorNumber(h), "arch", n.nvmlDeviceGetArchitecture(h), "maxgen", n.nvmlDeviceGetMaxPcieLinkGeneration(h), "maxwidth", n.nvmlDeviceGetMaxPcieLinkWidth(h), "curgen", n.nvmlDeviceGetCurrPcieLinkGeneration(h), "curwidth", n.nvmlDeviceGetCurrPcieLinkWidth(h))
print("pci", n.nvmlDeviceGetPciInfo(h).busId, hex(n.nvmlDeviceGetPciInfo(h).pciDeviceId), "cm", n.nvmlDeviceGetComputeMode(h))
for p in n.nvmlDeviceGetMPSComputeRunningProcesses(h): print("mps proc", p.pid, p.usedGpuMemory>>20)
for p in n.nvmlDeviceGetComputeRunningProcesses(h): print("compute proc", p.pid, (p.usedGpuMemory or 0)>>20)
PY
echo "## second client while first runs, with lower env cap 2G and higher 100G"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2G python3 /tmp/alloc.py 0 2>&1 | head -3
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=100G python3 /tmp/alloc.py 0 2>&1 | head -3
c terminate_client $S $CP
sleep 2; echo "client status after terminate:"; kill -0 $CP 2>&1 && echo alive || echo gone; wait $CP; echo "client rc=$?"; tail -3 /tmp/client.out
c get_server_list
c quit
sleep 1
echo "## ps of control"; ps -eo pid,ppid,sid,user,args | grep -i mps | grep -v grep
echo "## -f foreground start and kill"; 
nvidia-cuda-mps-control -f > /tmp/fg.out 2>&1 & FP=$!; sleep 1; c get_server_list; kill $FP; sleep 0.5; head -5 /tmp/fg.out
c get_server_list
} > "$OUT/mps-probe2.txt" 2>&1
echo done
