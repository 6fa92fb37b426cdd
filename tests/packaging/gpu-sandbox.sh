#!/usr/bin/env bash
# gpu-sandbox.sh: on a GPU host without systemd (the GPU test machines are
# containers), run mps-daemon inside what yunion-mps-daemon.service's
# mount-namespace settings give it, and a CUDA client outside, as a
# container would be:
#   ProtectSystem=full        /usr, /boot, /etc read-only
#   ProtectHome=read-only     /home, /root read-only
#   ProtectControlGroups=yes  /sys/fs/cgroup read-only
#   NoNewPrivileges=yes       no_new_privs
# (the seccomp-based settings, SystemCallArchitectures=, LockPersonality=,
# RestrictSUIDSGID=, need systemd and are not reproduced). The MPS control
# daemon and the MPS server the client starts are the daemon's children and
# inherit all of it. Passes when the daemon registers the devices (limits
# applied and read back) and a client outside the namespace is held to the
# cap. Leaves the card's settings alone (mps_set_exclusive_compute_mode:
# false) and stops its MPS control daemon at the end.
#   device run: BIN=dist/bin bash tests/packaging/gpu-sandbox.sh   with carry ["dist"]
# (dist/bin: mps-daemon, mps-inventory, mpsctl from `make build BIN=dist/bin`).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
B=${BIN:-$here/../../bin}
N=4
if pgrep -f 'nvidia-cuda-mps-control( |$)' >/dev/null; then
	echo "an MPS control daemon already runs here; not starting another" >&2
	exit 2
fi
W=$(mktemp -d /tmp/sbx.XXXX)
chmod 755 "$W"
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 1
	for d in "$W"/pipe/*/; do
		[ -S "$d/control" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 nvidia-cuda-mps-control
	done
	[ -n "${OUT:-}" ] && cp "$W"/*.log "$OUT/" 2>/dev/null
}
trap cleanup EXIT

UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1)
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
"$B/mps-inventory" --listen 127.0.0.1:0 --db "$W/inventory.db" --address-file "$W/inv.addr" \
	--admin-token-file "$W/admin.token" 2>"$W/inventory.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/inv.addr" ] && [ -s "$W/admin.token" ] && break; sleep 0.1; done
URL=http://$(cat "$W/inv.addr")
printf 'devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: %s\n' "$N" >"$W/devices.yml"
cat >"$W/host.conf" <<CONF
enable_cuda_mps: true
container_device_config_file: $W/devices.yml
cuda_mps_pipe_directory: $W/pipe
cuda_mps_log_directory: $W/log
mps_inventory_url: $URL
mps_inventory_token_file: $W/admin.token
mps_listen_address: 127.0.0.1:19341
mps_state_directory: $W/state
mps_cdi_directory: $W/cdi
mps_set_exclusive_compute_mode: false
mps_host_name: gpu-sandbox
CONF

# The namespace: read-only binds over the paths systemd makes read-only,
# recursive, as systemd makes them: the GPU container's driver directory
# (/usr/local/nvidia) is a mount of its own under /usr.
unshare --mount --propagation private -- /bin/sh -ec '
	for d in /usr /boot /etc /home /root /sys/fs/cgroup; do
		if [ -d "$d" ]; then mount --rbind "$d" "$d"; fi
	done
	awk "{print \$5}" /proc/self/mountinfo | while read -r m; do
		case $m in
		/usr | /usr/* | /boot | /boot/* | /etc | /etc/* | /home | /home/* | /root | /root/* | /sys/fs/cgroup | /sys/fs/cgroup/*)
			mount -o remount,bind,ro "$m" 2>/dev/null || echo "sandbox: could not make $m read-only" >&2
			;;
		esac
	done
	if touch /etc/.sbx-probe 2>/dev/null || touch /usr/.sbx-probe 2>/dev/null; then
		echo "sandbox: /etc or /usr is writable: not in place" >&2
		exit 1
	fi
	exec setpriv --no-new-privs "$0" --config "$1" --log-level debug
' "$B/mps-daemon" "$W/host.conf" 2>"$W/daemon.log" &
PIDS+=($!)

ok=
for _ in $(seq 300); do
	if python3 -c 'import sys,urllib.request; sys.exit(0 if urllib.request.urlopen("http://127.0.0.1:19341/readyz", timeout=2).status == 200 else 1)' 2>/dev/null; then
		ok=1
		break
	fi
	kill -0 "${PIDS[1]}" 2>/dev/null || break
	sleep 0.2
done
status=0
if [ -z "$ok" ]; then
	echo "FAIL: the sandboxed daemon did not become ready"
	tail -n 30 "$W/daemon.log"
	exit 1
fi
echo "PASS: the daemon in the sandbox is ready (MPS control daemon started, limits applied and read back)"
dpid=$(pgrep -f 'nvidia-cuda-mps-control( |$)' | head -n 1)
echo "      control daemon $dpid: no_new_privs $(awk '/^NoNewPrivs/{print $2}' /proc/"$dpid"/status)," \
	"mount namespace $( [ "$(readlink /proc/"$dpid"/ns/mnt)" != "$(readlink /proc/self/ns/mnt)" ] && echo private || echo shared)"
n=$(MPS_INVENTORY_URL=$URL MPS_INVENTORY_TOKEN=$(cat "$W/admin.token") "$B/mpsctl" isolated-device-list | grep -c NVIDIA_MPS)
if [ "$n" = "$N" ]; then
	echo "PASS: $n devices registered"
else
	echo "FAIL: $n devices registered, want $N"
	status=1
fi

# A client outside the namespace, as a container: the MPS server it starts
# is a child of the sandboxed control daemon.
got=$(CUDA_MPS_PIPE_DIRECTORY=$W/pipe/$UUID CUDA_MPS_LOG_DIRECTORY=$W/log/$UUID CUDA_VISIBLE_DEVICES=$UUID \
	timeout 300 python3 "$here/../gpu/clients/alloc.py" 2>"$W/client.log" | tail -n 1)
cap=$((TOTAL / N))
echo "client outside the namespace allocated ${got:-nothing} MiB; cap $cap MiB of $TOTAL"
if [ -n "$got" ] && [ "$got" -gt 0 ] && [ "$got" -le "$cap" ]; then
	echo "PASS: the client is served and held to the cap"
else
	echo "FAIL: client not served, or not held to the cap"
	tail -n 20 "$W/client.log"
	status=1
fi
spid=$(pgrep -f 'nvidia-cuda-mps-server( |$)' | head -n 1)
[ -n "$spid" ] && echo "      MPS server $spid: no_new_privs $(awk '/^NoNewPrivs/{print $2}' /proc/"$spid"/status)," \
	"/etc mounted $(awk '$2 == "/etc" {o = $4} END {split(o, a, ","); print a[1]}' /proc/"$spid"/mounts) in its namespace"
exit "$status"
