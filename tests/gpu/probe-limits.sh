#!/usr/bin/env bash
# What a client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT does to the memory
# limit MPS holds it to (issue 33): can an environment that names another
# ordinal, or nothing, lift the control daemon's default? Per-GPU and single
# layouts, -multiuser-server as the daemon starts them. A driver-API client
# (clients/cuda_client.py) allocates until refused.
#   device run (a kind with 2+ GPUs): bash tests/gpu/probe-limits.sh
# Output: $OUT/probe-limits.txt (kept as docs/gpu-runs/mps-probe-limits.txt).
set -uo pipefail
OUT=${OUT:-/tmp/probe-limits-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
CL="python3 $HERE/clients/cuda_client.py"
R=$OUT/probe-limits.txt
W=$(mktemp -d /tmp/pl.XXXX); chmod 755 "$W"
say() { echo "$*" | tee -a "$R"; }
: >"$R"
say "# A client's own pinned memory limit against the daemon's default: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv | tee -a "$R"
mapfile -t UU < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
A=${UU[0]} B=${UU[${#UU[@]}-1]}
ctl() { local p=$1; shift; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$p timeout 10 nvidia-cuda-mps-control 2>&1; }
start() { mkdir -p "$1" "$1.log"; chmod 755 "$1" "$1.log"
	CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_MPS_LOG_DIRECTORY=$1.log CUDA_VISIBLE_DEVICES=$2 nvidia-cuda-mps-control -d -multiuser-server; }
stop() { ctl "$1" quit >/dev/null; for _ in $(seq 50); do [ -e "$1/nvidia-cuda-mps-control.pid" ] || break; sleep 0.1; done; }
row() { local label=$1 envs=(); shift; while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done; [ $# -gt 0 ] && shift
	say "| $label | $(env -u CUDA_VISIBLE_DEVICES -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "${envs[@]}" timeout 120 $CL "$@" 2>&1 | tr '\n' ' ') |"; }
say "A=$A B=$B"
say
say "## Per-GPU layout: B's daemon, default limit 6G"
P=$W/pB; start "$P" "$B"; ctl "$P" set_default_device_pinned_mem_limit 0 6G >/dev/null
say "| client (CUDA_VISIBLE_DEVICES=B unless said) | MiB it got, GPU |"
say "|---|---|"
E="CUDA_MPS_PIPE_DIRECTORY=$P"
row "no limit of its own" $E CUDA_VISIBLE_DEVICES=$B -- alloc
row "=1=2048M (an ordinal it does not have)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M -- alloc
row "=1=2048M, CUDA_VISIBLE_DEVICES unset" $E CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M -- alloc
row "= (empty)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT= -- alloc
row "=x (garbage)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x -- alloc
row "=0=16G (above the default)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=16G -- alloc
row "=0=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M -- alloc
row "=0=0" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=0 -- alloc
row "=<B>=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$B=2048M -- alloc
row "=<A>=2048M (another GPU's UUID)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$A=2048M -- alloc
row "=0=2048M,1=1M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M,1=1M -- alloc
row "=1=1M,0=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=1M,0=2048M -- alloc
row "=2048M (no ordinal)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=2048M -- alloc
stop "$P"
say
say "## Per-GPU layout: B's daemon with no default limit (the control as a sized-claim GPU would run it)"
P=$W/pB2; start "$P" "$B"
E="CUDA_MPS_PIPE_DIRECTORY=$P"
row "=0=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M -- alloc
row "=1=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M -- alloc
stop "$P"
if [ "${#UU[@]}" -ge 2 ]; then
say
say "## Single layout: one daemon for A,B; default 0 = 8G, 1 = 4G"
P=$W/p1; start "$P" "$A,$B"
ctl "$P" set_default_device_pinned_mem_limit 0 8G >/dev/null; ctl "$P" set_default_device_pinned_mem_limit 1 4G >/dev/null
E="CUDA_MPS_PIPE_DIRECTORY=$P"
row "=B, no limit of its own" $E CUDA_VISIBLE_DEVICES=$B -- alloc
row "=B, =0=4096M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M -- alloc
row "=B, =1=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M -- alloc
row "=B, =<A>=2048M" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$A=2048M -- alloc
row "=B, = (empty)" $E CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT= -- alloc
row "unset, alloc ordinal 1, =0=1024M" $E CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M -- alloc 1
stop "$P"
fi
