#!/usr/bin/env bash
# Issue 45 on a real GPU: Cloudpods' own pods, made through CRI by a real
# containerd (the bundle's: 2.x built from the Go module proxy, Debian's
# runc) as Cloudpods' host agent makes them (tests/gpu/cri_config.py:
# cgroup parent /cloudpods, its labels, the pipe root and /dev/shm
# read-write, CUDA_MPS_PIPE_DIRECTORY and NVIDIA_VISIBLE_DEVICES), against
# the daemon in the single pipe layout, 4 slices, mps_accounting: enforce.
# The pods run the host's python3 and PyTorch: the host's /usr bound
# read-only into a busybox image (tests/gpu/oci_image.py), the GPU's device
# nodes given as the nvidia runtime gives them to Cloudpods' pods; the
# pods keep the host's network (no CNI here).
#   make gpu-bundle                              (here)
#   device run: bash tests/gpu/cloudpods-pod.sh  with carry [".gpu-bundle/pods"], timeout 420 s
#   (.gpu-bundle/pods: everything it needs, xz-compressed, about 45 MB)
# Checks: a pod's two processes at 0.7 x its server's slice (one
# terminated, one runs on); a pod's process whose environment lifts its MPS
# limit killed as it connects, a neighbour pod allocating its own slice
# right after never failing; with the daemon's NRI plugin (mps_nri): the
# slice's environment, identity and view in a pod (PyTorch sees the slice
# as its GPU), and `quit` from that pod refused; last, `quit` from a pod
# without NRI (refused only where the privileged socket is out of the pipe
# root: issue 45's other half, pkg/mps). Results in $OUT/cloudpods-pod.md,
# logs in $OUT/logs.tgz. Never changes the card's settings.
set -uo pipefail
OUT=${OUT:-/tmp/cloudpods-pod-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
PODS=$(cd "$HERE/../../.gpu-bundle/pods" && pwd)
C=$HERE/clients
REPORT=$OUT/cloudpods-pod.md
W=$(mktemp -d /tmp/cp.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19341
T_START=$(date +%s)
. "$HERE/lib.sh"
elapsed() { echo $(( $(date +%s) - T_START )); }

: >"$REPORT"
say "# Cloudpods pods on a real GPU (issue 45): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say
nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
ADDR=$(echo "$BUS" | tr 'A-F' 'a-f' | sed 's/^[0-9a-f]*://')
PIPE=$W/pipe
CTR=$W/ctrd
BIN=$W/bin
IMAGE=localhost/mps-gpu-busybox:1
SA=0b9a2f5e-0000-4000-8000-00000000000a   # one slice each
SB=0b9a2f5e-0000-4000-8000-00000000000b
SC=0b9a2f5e-0000-4000-8000-00000000000c
SD=0b9a2f5e-0000-4000-8000-00000000000d
mkdir -p "$BIN" "$PIPE" "$W/log" "$CTR/logs"

# What the bundle carries, unpacked (python3's lzma: xz may be missing);
# lib.sh runs the daemon, the inventory and mpsctl from $B.
for f in "$PODS"/*.xz; do
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$BIN/$(basename "$f" .xz)"
	chmod 755 "$BIN/$(basename "$f" .xz)"
done
cp "$PODS/libyunion-mps-view.so" "$BIN/"
B=$BIN
say "containerd $("$BIN/containerd" --version | awk '{print $3}'), $("$BIN/runc" --version | head -1), crictl (cri-tools v1.34.0), kernel $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup)"

# containerd: its own root, state, socket and runc root; CRI on, cgroupfs,
# CDI off, as Cloudpods deploys it; NRI on with its socket here (a
# container made while no plugin answers gets no edits). The configuration
# is tests/e2e's (testdata/containerd.toml), its names filled in here.
DIR=$CTR RUNC=$BIN/runc ARCH=amd64 NRI_DISABLE=false NRI_SOCKET=$CTR/nri.sock IMAGE=$IMAGE python3 -c '
import os, re, sys
t = open(sys.argv[1]).read()
sys.stdout.write(re.sub(r"\$\{(\w+)\}", lambda m: os.environ[m.group(1)], t))' "$HERE/../e2e/testdata/containerd.toml" >"$CTR/config.toml" || exit 1
mkdir -p "$CTR/cni"
PATH=$BIN:$PATH "$BIN/containerd" --config "$CTR/config.toml" >"$W/containerd.log" 2>&1 &
CTRD_PID=$!; PIDS+=($CTRD_PID)
crictl() { "$BIN/crictl" --runtime-endpoint "unix://$CTR/c.sock" --image-endpoint "unix://$CTR/c.sock" --timeout 60s "$@" 2>>"$W/crictl.log"; }
until_ok 20 crictl info >/dev/null; check "containerd's CRI answers" $?
python3 "$HERE/oci_image.py" "$BIN/busybox" "$W/image.tar" "$IMAGE" &&
	"$BIN/ctr" --address "$CTR/c.sock" --namespace k8s.io images import --snapshotter native "$W/image.tar" >>"$W/crictl.log" 2>&1
check "the pods' image imported (no registry)" $?

# cleanup: the pods and containerd gone, then lib.sh's (processes, logs);
# the single layout's control daemon quit.
pods_cleanup() {
	for p in $(crictl pods -q 2>/dev/null); do crictl stopp "$p" >/dev/null; crictl rmp -f "$p" >/dev/null; done
	[ -S "$PIPE/control" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
	cleanup
	umount -R -l "$CTR" 2>/dev/null
}
trap pods_cleanup EXIT
trap 'exit 143' TERM INT   # a call cut short still cleans up

# The daemon: single layout at $PIPE, 4 slices, enforce; NRI as $1.
start_inventory
write_conf() {
	{
		host_conf "$PIPE" "$W/log" cloudpods-pod
		cat <<CONF
mps_pipe_layout: single
mps_thread_percentage: even
mps_accounting: enforce
mps_sync_interval: 2s
mps_health_interval: 1s
mps_containerd_state_directory: $CTR/state
mps_view_library: $B/libyunion-mps-view.so
mps_nri: $1
mps_nri_socket: $CTR/nri.sock
CONF
	} >"$W/host.conf"
}
write_conf false
set_vn 4
start_daemon "$W/daemon.log"
wait_ready; check "daemon ready (single layout, 4 slices)" $?
CAP=$(field "$ADDR-0" mps_memory_limit)
say "slice cap: $CAP MiB"
for s in "0 $SA" "1 $SB" "2 $SC" "3 $SD"; do
	set -- $s
	mpsctl server-attach-isolated-device "$2" "$(field "$ADDR-$1" id)" >/dev/null
done
until_ok 20 is "$ADDR-3" guest_id "$SD"; check "servers A-D each hold one slice" $?

# What a pod's container needs to run the host's PyTorch: the host's /usr
# (and the Python prefix and PyTorch's directory where they are elsewhere),
# the linker cache and alternatives, the GPU's device nodes, the clients
# (tests/gpu/clients, at the same path).
MOUNTS=(--mount /usr:ro --mount /etc/ld.so.cache:ro --mount /etc/alternatives:ro --mount "$C:ro")
for d in $(python3 -c 'import sys, os, torch; print(sys.prefix, os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null); do
	case $d in /usr|/usr/*) ;; *) MOUNTS+=(--mount "$d:ro") ;; esac
done
for d in /dev/nvidia*; do [ -c "$d" ] && MOUNTS+=(--device "$d"); done
PYENV=(--env "PATH=$(dirname "$(command -v python3)"):/usr/bin:/bin" --env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" --env PYTHONUNBUFFERED=1)
# runpod SERVER NAME: the pod's id
runpod() {
	mkdir -p "$CTR/logs/$2"
	python3 "$HERE/cri_config.py" pod "$1" "$2" "$CTR/logs/$2" >"$W/$2.pod.json"
	crictl runp "$W/$2.pod.json"
}
# container POD_ID SERVER PODNAME CTRNAME [--env K=V]... -- CMD...: starts it, prints its id
container() {
	local pid=$1 server=$2 pod=$3 name=$4; shift 4
	python3 "$HERE/cri_config.py" container "$server" "$pod" "$name" "$IMAGE" "$PIPE" "$UUID" "${MOUNTS[@]}" "${PYENV[@]}" "$@" >"$W/$pod-$name.json"
	local id; id=$(crictl create "$pid" "$W/$pod-$name.json" "$W/$pod.pod.json") && crictl start "$id" >/dev/null && echo "$id"
}
logof() { sed 's/^[^ ]* [^ ]* [^ ]* //' "$CTR/logs/$1/$2.log" 2>/dev/null; }   # POD CTR: what it printed
# status_py EXPR: EXPR over /status (as st) printed
status_py() { python3 -c 'import json, sys, urllib.request; st = json.load(urllib.request.urlopen(sys.argv[1], timeout=2)); print(eval(sys.argv[2]))' "http://$DAEMON_ADDR/status" "$1" 2>/dev/null; }

say
say "## 1. A pod's two processes at 0.7 x its server's one slice (the issue: both ran, 1.4 x)"
P70=$((CAP * 7 / 10))
PA=$(runpod "$SA" pod-a)
CA=$(container "$PA" "$SA" pod-a main -- sh -c "python3 $C/hold.py 40 $P70 > /tmp/1.log 2>&1 & sleep 6; python3 $C/hold.py 40 $P70 > /tmp/2.log 2>&1 & wait; cat /tmp/1.log; echo ---; cat /tmp/2.log; sleep 3600")
[ -n "$CA" ]; check "pod A made through CRI" $? "(${CA:0:12})"
# has_term SERVER CAUSE N: N terminations of SERVER's clients for CAUSE in /status
has_term() { [ "$(status_py "sum(1 for t in (st.get('accounting') or {}).get('terminations') or [] if t.get('server') == '$1' and t['cause'] == '$2')")" -ge "$3" ] 2>/dev/null; }
until_ok 60 has_term "$SA" memory_cap 1; check "a process of pod A terminated when the pod passed its server's slice" $?
status_py "[p for p in st.get('pods') or [] if p['server'] == '$SA']" | block
sleep 2
ALIVE=$(pgrep -f "^python3 $C/hold.py 40 $P70" | wc -l)
check "the other process of pod A runs on" "$([ "$ALIVE" = 1 ]; echo $?)" "($ALIVE of 2 running)"
grep -E "Cloudpods pod over|terminating Cloudpods pod" "$W/daemon.log" | head -3 | block

say
say "## 2. A pod's limit escape (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x) killed at connect; a neighbour pod allocating its own slice right after"
PB=$(runpod "$SB" pod-b)
PC=$(runpod "$SC" pod-c)
OK=0
for try in 1 2 3; do
	container "$PB" "$SB" pod-b "escaper-$try" --env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x -- python3 "$C/alloc_hold.py" 20 >/dev/null
	until_ok 30 has_term "$SB" limit_escape "$try"
	container "$PC" "$SC" pod-c "neighbour-$try" -- python3 "$C/hold.py" 3 $((CAP * 9 / 10)) >/dev/null
	until_ok 60 grep -qE "finished|died" "$CTR/logs/pod-c/neighbour-$try.log"
	E=$(logof pod-b "escaper-$try"); N=$(logof pod-c "neighbour-$try")
	say "try $try: escaper printed: $(echo "$E" | tr '\n' ' ' | cut -c1-160); neighbour: $(echo "$N" | tail -1 | cut -c1-120)"
	if echo "$E" | grep -q reached || ! echo "$N" | grep -q finished; then OK=1; fi
done
check "every escaper killed before it allocated, every neighbour got 0.9 x its slice" $OK
status_py "[(t['pid'], t['cause'], t['detected'], t.get('server')) for t in st['accounting']['terminations'] if t.get('server') == '$SB']" | block

say
say "## 3. With the daemon's NRI plugin (mps_nri: true): the slice in a pod"
kill -TERM "$DPID"; wait "$DPID"
write_conf true
start_daemon "$W/daemon-nri.log"
wait_ready && until_ok 30 grep -q "NRI plugin registered" "$W/daemon-nri.log"; check "the NRI plugin registered with containerd" $?
PD=$(runpod "$SD" pod-d)
container "$PD" "$SD" pod-d view -- sh -c 'echo "ENV $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT|$CUDA_VISIBLE_DEVICES|$YUNION_MPS_VIRTUAL_DEVICE"; echo "IDENTITY $(cat /run/yunion-mps/devices/$NVIDIA_VISIBLE_DEVICES)"; echo "PRIVILEGED $(stat -c %t:%T $CUDA_MPS_PIPE_DIRECTORY/control_privileged 2>&1)"; python3 -c "import torch; f, t = torch.cuda.mem_get_info(); print(\"TORCH\", t >> 20, f >> 20)"; echo "QUIT $(echo quit | timeout 10 nvidia-cuda-mps-control 2>&1 | head -1)"; echo DONE' >/dev/null
until_ok 90 grep -q DONE "$CTR/logs/pod-d/view.log"
V=$(logof pod-d view); echo "$V" | block
echo "$V" | grep -q "^ENV 0=${CAP}M|$UUID|$UUID::3"; check "the slice's environment (its cap, its GPU, its name) over Cloudpods'" $?
echo "$V" | grep -q "^IDENTITY $UUID::3"; check "the slice's identity file" $?
echo "$V" | grep -q "^PRIVILEGED 1:3"; check "the privileged socket masked (/dev/null)" $?
TT=$(echo "$V" | awk '$1 == "TORCH" {print $2}')
sleep 2
check "PyTorch in the pod sees the slice as its GPU (the view)" "$([ -n "$TT" ] && [ "$TT" -le "$CAP" ] && [ "$TT" -ge $((CAP - 1024)) ]; echo $?)" "(total $TT MiB, slice $CAP MiB)"
check "quit from the pod refused: the control daemon serves on" "$(ctl get_server_list >/dev/null; echo $?)" "($(echo "$V" | grep ^QUIT | cut -c1-100))"

say
say "## 4. quit from a pod without NRI (Cloudpods' mounts alone): refused only with the privileged socket out of the pipe root (pkg/mps, issue 45)"
ls -la "$PIPE" | block
# exec into pod A's container, made before the plugin: Cloudpods' mounts.
Q=$(crictl exec "$CA" sh -c 'echo quit | timeout 10 nvidia-cuda-mps-control 2>&1 | head -1')
say "quit exec'd into pod A printed: $(echo "$Q" | cut -c1-120)"
sleep 2
check "quit from a Cloudpods pod without NRI refused: the control daemon serves on" "$(ctl get_server_list >/dev/null; echo $?)"

say
say "daemon log, pods' lines:"
grep -hE "Cloudpods|pod|NRI" "$W/daemon.log" "$W/daemon-nri.log" | grep -v level=DEBUG | cut -c1-300 | tail -20 | block
say
say "took $(elapsed) s; $([ $FAIL = 0 ] && echo 0 FAIL || echo FAILURES)"
exit $FAIL
