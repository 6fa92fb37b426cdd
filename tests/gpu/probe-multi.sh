#!/usr/bin/env bash
# What MPS does with clients on a host of several GPUs (issue 33), measured
# with nvidia-cuda-mps-control and a driver-API client alone (no daemon of
# ours): which GPUs a client sees and which per-device memory limit holds
# it, in the per-GPU layout (one control daemon per GPU) and the single one
# (one daemon for all). Never changes the card's settings.
#   device run (a kind with 2+ GPUs): bash tests/gpu/probe-multi.sh
# Output: $OUT/probe-multi.txt (kept as docs/gpu-runs/mps-probe-multi.txt).
set -uo pipefail
OUT=${OUT:-/tmp/probe-multi-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
CL="python3 $HERE/clients/cuda_client.py"
R=$OUT/probe-multi.txt
W=$(mktemp -d /tmp/pm.XXXX); chmod 755 "$W"
say() { echo "$*" | tee -a "$R"; }
: >"$R"
say "# MPS on several GPUs: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | tee -a "$R"
mapfile -t UU < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
[ "${#UU[@]}" -ge 2 ] || { say "needs two GPUs"; exit 2; }
A=${UU[0]} B=${UU[1]}
minor() { nvidia-smi -q -i "$1" | awk -F: '/Minor Number/ {gsub(/ /,"",$2); print $2; exit}'; }
MA=$(minor "$A") MB=$(minor "$B")
say "A=$A (/dev/nvidia$MA)  B=$B (/dev/nvidia$MB)"
say "control version: $(nvidia-cuda-mps-control -v 2>&1 | head -1)"
ctl() { local p=$1; shift; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$p timeout 10 nvidia-cuda-mps-control 2>&1; }
start() { # start PIPE VISIBLE [-multiuser-server]
	mkdir -p "$1" "$1.log"; chmod 755 "$1" "$1.log"
	CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_MPS_LOG_DIRECTORY=$1.log CUDA_VISIBLE_DEVICES=$2 nvidia-cuda-mps-control -d ${3:-}
}
stop() { ctl "$1" quit >/dev/null; for _ in $(seq 50); do [ -e "$1/nvidia-cuda-mps-control.pid" ] || break; sleep 0.1; done; }
# only_dev NODE... -- CMD: CMD in a mount namespace whose /dev holds only
# the named nodes (plus null, zero, urandom, shm), as a CDI-only container's.
only_dev() {
	local nodes=() n
	while [ "$1" != -- ]; do nodes+=("$1"); shift; done; shift
	local setup="mkdir -p $W/hostdev && mount --rbind /dev $W/hostdev && mount -t tmpfs -o mode=755 tmpfs /dev && mkdir /dev/shm && mount --bind $W/hostdev/shm /dev/shm"
	for n in "${nodes[@]}" null zero urandom; do setup="$setup && touch /dev/$n && mount --bind $W/hostdev/$n /dev/$n"; done
	unshare --mount --propagation private sh -c "$setup && exec \"\$@\"" sh "$@"
}
# row LABEL ENV... [-- CLIENT ARGS]: one client run, "label | what it printed"
row() { local label=$1 envs=(); shift; while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done; [ $# -gt 0 ] && shift
	say "| $label | $(env -u CUDA_VISIBLE_DEVICES "${envs[@]}" timeout 60 $CL "$@" 2>&1 | tr '\n' ' ') |"; }
# rowdev LABEL NODES -- ENV... [-- CLIENT ARGS]: the same in a private /dev
rowdev() { local label=$1 nodes=(); shift; while [ "$1" != -- ]; do nodes+=("$1"); shift; done; shift
	local envs=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done; [ $# -gt 0 ] && shift
	say "| $label | $(only_dev "${nodes[@]}" -- env -u CUDA_VISIBLE_DEVICES "${envs[@]}" timeout 60 $CL "$@" 2>&1 | tr '\n' ' ') |"; }

say
for MODE in "" -multiuser-server; do
say "## 1${MODE:+m}. Per-GPU layout: a control daemon started with CUDA_VISIBLE_DEVICES=B ${MODE:-(-d alone)}"
P=$W/pB$MODE; start "$P" "$B" $MODE
ctl "$P" set_default_device_pinned_mem_limit 0 6G >/dev/null
say "| client | printed |"
say "|---|---|"
row "host process, CUDA_VISIBLE_DEVICES unset, init" CUDA_MPS_PIPE_DIRECTORY=$P
row "host process, unset, the CDI entry's env (limit 0=6144M, threads 50, priority 0)" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=6144M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 CUDA_MPS_CLIENT_PRIORITY=0 NVIDIA_VISIBLE_DEVICES=$B
row "host process, =B, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B
row "host process, =B with upper-case hex, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=GPU-$(echo "${B#GPU-}" | tr 'a-f' 'A-F')
row "host process, =b (gpu- prefix lower case), init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=gpu-${B#GPU-}
row "host process, =0, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=0
row "host process, =1, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=1
row "host process, =A (a GPU the daemon does not serve), init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A
row "host process, =B,A, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B,$A
row "host process, =A,B, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A,$B
row "host process, =GPU-nonexistent, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000
row "host process, empty CUDA_VISIBLE_DEVICES, init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=
rowdev "/dev: B's node only, unset, init" nvidia$MB nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P
rowdev "/dev: B's node only, =B, init" nvidia$MB nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B
rowdev "/dev: B's node only, =B, alloc (cap 6G)" nvidia$MB nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B -- alloc
rowdev "/dev: B's node only, =0, alloc (cap 6G)" nvidia$MB nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=0 -- alloc
rowdev "/dev: A's node only, =B, init" nvidia$MA nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B
rowdev "/dev: no GPU node, =B, init" nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B
say "control.log of B's daemon (last lines):"
tail -8 "$P.log/control.log" | sed 's/^/    /' | tee -a "$R" >/dev/null
stop "$P"
say
done

say
say "## 2. Single layout: one control daemon (-multiuser-server) with CUDA_VISIBLE_DEVICES=A,B; defaults set by ordinal, 0 = 8G, 1 = 4G"
P=$W/p1; start "$P" "$A,$B" -multiuser-server
say "set 0: $(ctl "$P" set_default_device_pinned_mem_limit 0 8G) set 1: $(ctl "$P" set_default_device_pinned_mem_limit 1 4G)"
say "get 0: $(ctl "$P" get_default_device_pinned_mem_limit 0) get 1: $(ctl "$P" get_default_device_pinned_mem_limit 1)"
say "| client | printed (MiB, the GPU it ran on) |"
say "|---|---|"
row "=A,B alloc ordinal 0" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A,$B -- alloc 0
row "=A,B alloc ordinal 1" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A,$B -- alloc 1
row "=B alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B -- alloc
row "=A alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A -- alloc
row "=B,A alloc ordinal 0 (B)" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B,$A -- alloc 0
row "=B,A alloc ordinal 1 (A)" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B,$A -- alloc 1
row "=1 alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=1 -- alloc
row "unset, init" CUDA_MPS_PIPE_DIRECTORY=$P
row "unset, alloc ordinal 1" CUDA_MPS_PIPE_DIRECTORY=$P -- alloc 1
row "=B and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M -- alloc
row "=B and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$B=4096M alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$B=4096M -- alloc
row "=B and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M -- alloc
rowdev "/dev: B's node only, =B alloc" nvidia$MB nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B -- alloc
rowdev "/dev: B's node only, unset, init" nvidia$MB nvidiactl nvidia-uvm nvidia-uvm-tools -- CUDA_MPS_PIPE_DIRECTORY=$P
S=$(ctl "$P" get_server_list | head -1)
say "server $S: get_device_client_list: $(ctl "$P" get_device_client_list "$S" | tr '\n' ' ')"
stop "$P"

say
say "## 3. Single layout, defaults set by UUID: A = 8G, B = 4G"
P=$W/p2; start "$P" "$A,$B" -multiuser-server
say "set A: $(ctl "$P" set_default_device_pinned_mem_limit "$A" 8G) set B: $(ctl "$P" set_default_device_pinned_mem_limit "$B" 4G)"
say "get A: $(ctl "$P" get_default_device_pinned_mem_limit "$A") get B: $(ctl "$P" get_default_device_pinned_mem_limit "$B") get 0: $(ctl "$P" get_default_device_pinned_mem_limit 0) get 1: $(ctl "$P" get_default_device_pinned_mem_limit 1)"
say "| client | printed |"
say "|---|---|"
row "=B alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B -- alloc
row "=A alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A -- alloc
row "=A,B alloc ordinal 1" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A,$B -- alloc 1
row "=B,A alloc ordinal 0 (B)" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B,$A -- alloc 0
stop "$P"

say
say "## 4. Single layout, a running server's limits by ordinal (set_device_pinned_mem_limit): 0 = 8G, 1 = 4G after the server started"
P=$W/p3; start "$P" "$A,$B" -multiuser-server
row "first client (starts the server), =A,B init" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A,$B
S=$(ctl "$P" get_server_list | head -1)
say "server $S: set 0: $(ctl "$P" set_device_pinned_mem_limit "$S" 0 8G) set 1: $(ctl "$P" set_device_pinned_mem_limit "$S" 1 4G) get 0: $(ctl "$P" get_device_pinned_mem_limit "$S" 0) get 1: $(ctl "$P" get_device_pinned_mem_limit "$S" 1)"
row "=B alloc" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$B -- alloc
row "=A,B alloc ordinal 1" CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$A,$B -- alloc 1
stop "$P"
CM=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
say
say "compute modes at the end: $CM"
