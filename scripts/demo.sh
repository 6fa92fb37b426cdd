#!/usr/bin/env bash
# make demo: the whole system on one machine with no GPU. Starts mps-inventory
# (SQLite) and mps-daemon on a SIMULATED host (8 x H100, simulated MPS) with
# the example configs of etc/, in a temporary directory; prints
# `mpsctl isolated-device-list` once the devices are registered; stops both on
# Ctrl-C, or after DEMO_SECONDS if that is set.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
PROFILE=${DEMO_PROFILE:-8xH100}
# A short directory: MPS socket paths must stay under 107 bytes.
DIR=$(mktemp -d /tmp/mps-demo.XXXXXX)
INV_PID= DAEMON_PID=

cleanup() {
	trap - EXIT INT TERM
	[ -n "$DAEMON_PID" ] && kill -TERM "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null || true
	[ -n "$INV_PID" ] && kill -TERM "$INV_PID" 2>/dev/null && wait "$INV_PID" 2>/dev/null || true
	echo "demo: stopped both; removed $DIR"
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

echo "demo: working directory $DIR"
# The inventory writes its admin token (mode 0600) before the address file.
"$BIN/mps-inventory" --listen 127.0.0.1:0 --db "$DIR/inventory.db" --admin-token-file "$DIR/admin.token" \
	--address-file "$DIR/inventory.addr" 2>"$DIR/inventory.log" &
INV_PID=$!
for _ in $(seq 100); do [ -s "$DIR/inventory.addr" ] && break; sleep 0.1; done
[ -s "$DIR/inventory.addr" ] || { echo "demo: inventory did not start:"; cat "$DIR/inventory.log"; exit 1; }
URL="http://$(cat "$DIR/inventory.addr")"

# The view's library as make tenant built it (make demo builds it): the
# simulated devices' CDI entries mount it and their views are written; off
# when it was not built.
VIEW_LIB=$(cd "$BIN" && pwd)/libyunion-mps-view.so
if [ ! -f "$VIEW_LIB" ]; then
	echo "demo: $VIEW_LIB not built (make tenant): the view is off"
	VIEW_LIB='""'
fi

# The example host.conf with every path moved into the demo directory, the
# token file included (the daemon and mpsctl read the admin token there).
sed -e "s|^container_device_config_file:.*|container_device_config_file: $DIR/host_container_device.yml|" \
    -e "s|^cuda_mps_pipe_directory:.*|cuda_mps_pipe_directory: $DIR/pipe|" \
    -e "s|^cuda_mps_log_directory:.*|cuda_mps_log_directory: $DIR/log|" \
    -e "s|^mps_inventory_url:.*|mps_inventory_url: $URL|" \
    -e "s|^#* *mps_inventory_token_file:.*|mps_inventory_token_file: $DIR/admin.token|" \
    -e "s|^mps_listen_address:.*|mps_listen_address: 127.0.0.1:0|" \
    -e "s|^mps_state_directory:.*|mps_state_directory: $DIR/state|" \
    -e "s|^mps_cdi_directory:.*|mps_cdi_directory: $DIR/cdi|" \
    -e "s|^mps_view_library:.*|mps_view_library: $VIEW_LIB|" \
    etc/host.conf >"$DIR/host.conf"
cp etc/host_container_device.yml "$DIR/"

"$BIN/mps-daemon" --config "$DIR/host.conf" --simulate "$PROFILE" check-config
"$BIN/mps-daemon" --config "$DIR/host.conf" --simulate "$PROFILE" 2>"$DIR/daemon.log" &
DAEMON_PID=$!

# mpsctl finds the inventory and its token through host.conf, as on a host.
export MPS_HOST_CONF=$DIR/host.conf
total() { "$BIN/mpsctl" -o json isolated-device-list --limit 1 2>/dev/null | sed -n 's/.*"total": *\([0-9]*\).*/\1/p'; }
last=-1
for _ in $(seq 150); do
	kill -0 "$DAEMON_PID" 2>/dev/null || { echo "demo: the daemon exited:"; cat "$DIR/daemon.log"; exit 1; }
	t=$(total || true)
	if grep -q 'msg=reconciled' "$DIR/daemon.log" && [ -n "$t" ] && [ "$t" = "$last" ] && [ "$t" -gt 0 ]; then break; fi
	last=${t:--1}
	sleep 0.2
done
echo
echo "\$ mpsctl isolated-device-list"
"$BIN/mpsctl" isolated-device-list
echo
# What the containers of one device are told of their GPU's memory.
view=$(ls -d "$DIR"/state/view/GPU-*.0 2>/dev/null | head -n 1 || true)
if [ -n "$view" ]; then
	echo "\$ cat $view/memory    # what its containers' CUDA and NVML answer (docs/containers.md)"
	cat "$view/memory"
	echo
fi
echo "demo: inventory at $URL (MPS_HOST_CONF=$DIR/host.conf $BIN/mpsctl ...); daemon log: $DIR/daemon.log"
if [ -n "${DEMO_SECONDS:-}" ]; then
	sleep "$DEMO_SECONDS"
else
	echo "demo: Ctrl-C to stop"
	wait "$DAEMON_PID"
fi
