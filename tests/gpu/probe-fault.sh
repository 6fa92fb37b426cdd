#!/usr/bin/env bash
# Probe: what the control daemon reports while a client faults (illegal
# address), and after. Never changes card settings.
set -u
OUT=${OUT:-/tmp/mps-probe-out}; mkdir -p "$OUT"
R=$(mktemp -d /tmp/mpsf.XXXX); P=$R/p; L=$R/l; mkdir -p $P $L; chmod 755 $R $P $L
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
export CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L CUDA_VISIBLE_DEVICES=$UUID
q() { printf '%s\n' "$*" | timeout 10 nvidia-cuda-mps-control 2>&1 | tr '\n' '|'; }
cat > /tmp/healthy.py <<'PY'
import torch, time, sys
x = torch.ones(1 << 20, device="cuda"); t0 = time.time(); n = 0
try:
    while time.time() - t0 < float(sys.argv[1]):
        x = x * 1.0000001; torch.cuda.synchronize(); n += 1
    print("healthy finished", n, flush=True)
except Exception as e:
    print("healthy died:", type(e).__name__, str(e)[:200], flush=True); sys.exit(3)
PY
cat > /tmp/fault.py <<'PY'
import cupy as cp, time
time.sleep(2)
k = cp.RawKernel(r'''extern "C" __global__ void bad(int *p) { p[threadIdx.x] = 1; }''', 'bad')
try:
    k((1,), (32,), (cp.uint64(0xdead0000),)); cp.cuda.runtime.deviceSynchronize()
    print("fault: no error?", flush=True)
except Exception as e:
    print("fault client got:", type(e).__name__, str(e)[:200], flush=True)
time.sleep(3)
PY
{
nvidia-cuda-mps-control -d; sleep 0.5
python3 /tmp/healthy.py 25 > /tmp/h.out 2>&1 & H=$!
for i in $(seq 60); do S=$(q get_server_list | cut -d'|' -f1); [ -n "$S" ] && break; sleep 0.3; done
echo "server=$S healthy=$H"
echo "t0 status: $(q get_server_status $S) clients: $(q get_client_list $S)"
python3 /tmp/fault.py > /tmp/f.out 2>&1 & F=$!
for i in $(seq 24); do
	echo "t+$((i/2)).$(( (i%2)*5 ))s list=$(q get_server_list) status=$(q get_server_status $S) clients=$(q get_client_list $S) healthy_alive=$(kill -0 $H 2>/dev/null && echo y || echo n) fault_alive=$(kill -0 $F 2>/dev/null && echo y || echo n)"
	sleep 0.5
done
wait $F; echo "fault rc=$?"; cat /tmp/f.out
wait $H; echo "healthy rc=$?"; cat /tmp/h.out
echo "after both: list=$(q get_server_list) status=$(q get_server_status $S) clients=$(q get_client_list $S)"
echo "ps: $(q ps)"
python3 /tmp/healthy.py 2 2>&1 | tail -1
echo "after new client: list=$(q get_server_list) status=$(q get_server_status $S)"
echo "## kill -9 of the control daemon while a client runs"
python3 /tmp/healthy.py 20 > /tmp/h2.out 2>&1 & H2=$!
sleep 6; S2=$(q get_server_list | cut -d'|' -f1); echo "server2=$S2"
CP=$(cat $P/nvidia-cuda-mps-control.pid); echo "control pid $CP"; kill -9 $CP; sleep 2
echo "after kill: list=$(q get_server_list) server_alive=$(kill -0 $S2 2>/dev/null && echo y || echo n) client_alive=$(kill -0 $H2 2>/dev/null && echo y || echo n)"
wait $H2; echo "client rc=$?"; cat /tmp/h2.out
ls -la $P
nvidia-cuda-mps-control -d; echo "restart rc=$?"; sleep 0.5; echo "list=$(q get_server_list)"
python3 /tmp/healthy.py 2 2>&1 | tail -1
q quit; sleep 1
echo "## server.log tail"; tail -30 $L/server.log; echo "## control.log tail"; tail -40 $L/control.log
} > "$OUT/mps-probe-fault.txt" 2>&1
echo done
