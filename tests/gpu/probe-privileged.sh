#!/usr/bin/env bash
# What a root process that can reach a control daemon's pipe directory can
# do, and whether moving `control_privileged` out of that directory takes
# those powers away while CUDA clients are still served (issue 45: Cloudpods
# mounts the pipe root into its pods read-write). Runs on a GPU host as
# root; never changes the card's settings. Writes $OUT/probe-privileged.txt.
set -u
OUT=${OUT:-/tmp/probe-privileged-out}; mkdir -p "$OUT"
R=$(mktemp -d /tmp/privprobe.XXXX); chmod 755 "$R"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
# c DIR CMD...: one control command through pipe directory DIR
c() { local d=$1; shift; printf '### [%s] %s\n' "${d#$R/}" "$*"; printf '%s\n' "$*" | CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 nvidia-cuda-mps-control >/tmp/o 2>/tmp/e; echo "rc=$? out=$(tr '\n' '|' </tmp/o) err=$(tr '\n' '|' </tmp/e)"; }
alive() { pgrep -f "^nvidia-cuda-mps-control -d" >/dev/null && echo "control daemon: alive" || echo "control daemon: GONE"; }
client() { # client DIR SECONDS TAG: a CUDA client allocating 1 GiB through DIR
	CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_VISIBLE_DEVICES=$UUID python3 - "$2" "$3" <<'PY' &
import sys, time, torch
secs, tag = float(sys.argv[1]), sys.argv[2]
try:
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
    print(f"client {tag}: served, free/total MiB", [v >> 20 for v in torch.cuda.mem_get_info()], flush=True)
    time.sleep(secs); x += 1; torch.cuda.synchronize()
    print(f"client {tag}: done", flush=True)
except Exception as e:
    print(f"client {tag}: FAILED {e!r}", flush=True)
PY
}
{
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,compute_mode --format=csv,noheader
command -v strace || echo "no strace"
# --- A: the usual directory
P=$R/a/pipe; L=$R/a/log; mkdir -p $P $L; chmod -R 755 $R/a
CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L CUDA_VISIBLE_DEVICES=$UUID nvidia-cuda-mps-control -d; echo "A start rc=$?"
until [ -S $P/control ]; do sleep 0.1; done
echo "## A: pipe directory after start"; ls -la $P
client $P 6 A1; CP=$!
for _ in $(seq 100); do [ -n "$(c $P get_server_list | grep -o 'out=[0-9]')" ] && break; sleep 0.2; done
echo "## A: pipe directory with a server"; ls -la $P
if command -v strace >/dev/null; then
	echo "## A: what the control client opens"; echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$P strace -f -e trace=connect,openat,open,stat,access,newfstatat nvidia-cuda-mps-control 2>&1 | grep -v -e ENOENT.*lib -e '\.so' | tail -30
fi
# --- B: control_privileged moved to a directory beside the pipe directory
Q=$R/a/privileged; mkdir -p $Q; chmod 700 $Q
mv $P/control_privileged $Q/control_privileged; echo "B moved rc=$?"; ls -la $P $Q
c $P get_server_list
c $P get_default_active_thread_percentage
c $P set_default_active_thread_percentage 37
c $P set_default_device_pinned_mem_limit 0 3G
c $P get_default_device_pinned_mem_limit 0
S=$(printf 'get_server_list\n' | CUDA_MPS_PIPE_DIRECTORY=$P timeout 5 nvidia-cuda-mps-control | head -1)
c $P get_server_status $S
c $P set_active_thread_percentage $S 12
c $P terminate_client $S $CP
c $P shutdown_server $S
sleep 1; alive
# --- C: the control through a directory holding links to the others
for f in control control_lock nvidia-cuda-mps-control.pid log; do [ -e $P/$f ] && ln -s $P/$f $Q/$f; done
ls -la $Q
c $Q get_server_list
c $Q get_default_active_thread_percentage
c $Q set_default_active_thread_percentage 40
c $Q get_default_active_thread_percentage
c $Q set_default_device_pinned_mem_limit 0 20G
c $Q get_default_device_pinned_mem_limit 0
c $Q get_server_status $S
# --- C2: only the privileged socket there
Q2=$R/a/priv2; mkdir -p $Q2; chmod 700 $Q2; ln -s $Q/control_privileged $Q2/control_privileged
c $Q2 get_server_list
c $Q2 get_default_active_thread_percentage
# --- D: clients still served through the pipe directory
client $P 3 D1; D1=$!
client $P 3 D2; D2=$!
wait $CP $D1 $D2
echo "## D: alive after clients"; alive
# --- E: quit through the pipe directory while a client runs
client $P 8 E1; E1=$!
for _ in $(seq 100); do [ -n "$(c $Q get_server_list | grep -o 'out=[0-9]')" ] && break; sleep 0.2; done
c $P quit
sleep 1; alive
wait $E1
# --- F: quit through the moved socket
c $Q quit
sleep 1; alive; echo "## F: after quit"; ls -la $P $Q
# --- G: hard link of the control socket into another directory on the same file system
P3=$R/g/run; V=$R/g/visible; L3=$R/g/log; mkdir -p $P3 $V $L3; chmod -R 755 $R/g
CUDA_MPS_PIPE_DIRECTORY=$P3 CUDA_MPS_LOG_DIRECTORY=$L3 CUDA_VISIBLE_DEVICES=$UUID nvidia-cuda-mps-control -d; echo "G start rc=$?"
until [ -S $P3/control ]; do sleep 0.1; done
ln $P3/control $V/control; echo "G link rc=$?"; ls -la $V
client $V 2 G1; wait $!
c $V get_server_list
c $V quit
sleep 1; alive
c $P3 quit
sleep 1; alive
echo "## control.log A"; cat $L/control.log; echo "## control.log G"; cat $L3/control.log
} > "$OUT/probe-privileged.txt" 2>&1
pkill -f "^nvidia-cuda-mps-control -d" || true
echo done
