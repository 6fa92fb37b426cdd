#!/usr/bin/env bash
# The multi-GPU suite (issues 17 and 33), on every GPU of a host of 2 to 8:
#   make gpu-bundle
#   device run (the lent kind with the most GPUs): bash tests/gpu/multi.sh   with carry [".gpu-bundle"]
# Results go to $OUT/gpu-multi.md (kept in docs/gpu-runs/, indexed in
# docs/gpu-results.md). Like run.sh it never changes the card's settings
# (compute mode untouched) and gives MPS its own pipe and log roots.
#
# Every client runs as a container given one device would: the CDI spec's
# environment and mounts, in a mount namespace whose /dev holds only the
# nodes the spec hands over (clients/cdi_run.py), nothing set by hand.
# GPU i (nvidia-smi's order) is split into i+2 devices, so no two GPUs
# have the same cap and a client under the wrong GPU's cap shows.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-multi-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/../../.gpu-bundle
C=$HERE/clients
REPORT=$OUT/gpu-multi.md
W=$(mktemp -d /tmp/gm.XXXX); chmod 755 "$W"
PIDS=()
FAIL=0
DAEMON_ADDR=127.0.0.1:19341
. "$HERE/lib.sh"
: >"$REPORT"
say "# Multi-GPU suite: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_mode,driver_version --format=csv | block
mapfile -t UU < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
mapfile -t BB < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader)
NG=${#UU[@]}
if [ "$NG" -lt 2 ]; then say "RESULT: needs two GPUs, found $NG"; exit 2; fi
AD=() MI=() NV=()
for i in "${!UU[@]}"; do
	AD[i]=$(echo "${BB[i]}" | tr 'A-F' 'a-f' | sed 's/^[0-9a-f]*://')
	MI[i]=$(nvidia-smi -q -i "${UU[i]}" | awk -F: '/Minor Number/ {gsub(/ /,"",$2); print $2; exit}')
	NV[i]=$((i + 2))
done
say "GPUs: $NG; GPU i has i+2 devices (${NV[*]}); minors ${MI[*]}"
CM_BEFORE=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
SPEC=$W/cdi/yunion.io-mps-gpu.yaml
CL="python3 $C/cuda_client.py"

say
say "## 0. The MPS contracts against the real control (a control daemon per GPU; a client of GPU $((NG - 1)); another GPU: GPU 0)"
MPS_CONTRACT_REAL=1 MPS_CONTROL_BINARY=$(command -v nvidia-cuda-mps-control) MPS_CONTRACT_GPU=${UU[NG - 1]} MPS_CONTRACT_OTHER_GPU=${UU[0]} \
	MPS_CONTRACT_CLIENT="$CL" "$B/mps.test" -test.run 'Contract' -test.v -test.count=1 2>&1 | grep -E '^(--- |    --- |PASS|FAIL|ok)' | block
check "the simulated control and client answer as the real ones (TestContractReal, TestClientContractReal)" "${PIPESTATUS[0]}"

start_inventory
write_conf() { # write_conf PIPE_ROOT LOG_ROOT [extra lines]
	{
		host_conf "$1" "$2" gpu-multi
		cat <<CONF
mps_thread_percentage: even
mps_accounting: enforce
mps_sync_interval: 2s
mps_health_interval: 1s
${3:-}
CONF
	} >"$W/host.conf"
}
# set_devices: every GPU named another way (its node, UUID, PCI address),
# GPU i split into NV[i]; written atomically, as an editor saves.
set_devices() {
	{
		echo "devices:"
		for i in "${!UU[@]}"; do
			case $((i % 3)) in 0) p=/dev/nvidia${MI[i]} ;; 1) p=${UU[i]} ;; 2) p=${BB[i]} ;; esac
			printf -- '- path: "%s"\n  type: NVIDIA_MPS\n  virtual_number: %s\n' "$p" "${NV[i]}"
		done
	} >"$W/devices.yml.new"
	mv "$W/devices.yml.new" "$W/devices.yml"
}
ctlp() { local p=$1; shift; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$(priv_dir "$p") timeout 10 nvidia-cuda-mps-control 2>&1; }
# in_dev DEVICE [VAR=VALUE...] -- CMD...: CMD as a container given DEVICE.
in_dev() { python3 "$C/cdi_run.py" "$SPEC" "$@"; }
capof() { field "${AD[$1]}-0" mps_memory_limit; }         # capof GPU
idof() { field "${AD[$1]}-$2" id; }                       # idof GPU SLICE
within() { [ -n "$1" ] && [ "$1" -le "$2" ] && [ "$1" -gt $(($2 - 1024)) ]; }
rows_of() { devices | grep -F "\"${AD[$1]}-" | python3 -c 'import json,sys; print(sorted(json.loads(l)["id"] for l in sys.stdin))'; }
all_rows() { devices | python3 -c 'import json,sys; print(sorted((json.loads(l)["addr"], json.loads(l)["id"]) for l in sys.stdin))'; }
gpu_unhealthy() { [ "$(devices | grep -F "\"${AD[$1]}-" | grep -c '"unhealthy": true')" -eq "${NV[$1]}" ]; }
gpu_healthy() { [ "$(devices | grep -F "\"${AD[$1]}-" | grep -c '"unhealthy": false')" -eq "${NV[$1]}" ]; }
others_healthy() { local v=$1 i; for i in "${!UU[@]}"; do [ "$i" = "$v" ] || gpu_healthy "$i" || return 1; done; }
# run_on GPU DEVICE: one client of DEVICE allocating until refused; checks
# it ran on GPU's UUID, under the cap of GPU's devices.
run_on() {
	local g=$1 dev=$2 got mib uuid cap
	got=$(in_dev "$dev" -- $CL alloc 2>>"$W/clients.log")
	read -r mib uuid <<<"$got"
	cap=$(capof "$g")
	check "GPU $g: a client of $dev ran on ${UU[g]} and stopped at its cap" \
		"$([ "$uuid" = "${UU[g]}" ] && within "$mib" "$cap"; echo $?)" "($got; cap $cap MiB)"
}

say
say "## 1. Per-GPU layout: one control daemon per GPU, each GPU's devices capped at its own total/N"
write_conf "$W/pipe" "$W/log"
set_devices
start_daemon "$W/daemon.log"
wait_ready; check "daemon ready" $?
TOTAL=0; for n in "${NV[@]}"; do TOTAL=$((TOTAL + n)); done
mpsctl isolated-device-list --limit 100 2>&1 | block
check "$TOTAL rows, GPU i with i+2" "$([ "$(count)" = "$TOTAL" ] && for i in "${!UU[@]}"; do [ -n "$(idof "$i" $((NV[i] - 1)))" ] && gone "${AD[i]}-${NV[i]}" || exit 1; done; echo $?)"
for i in "${!UU[@]}"; do
	d=$(ctlp "$W/pipe/${UU[i]}" get_default_device_pinned_mem_limit 0)
	say "GPU $i (${UU[i]}, ${AD[i]}, /dev/nvidia${MI[i]}): its control daemon holds $d, threads $(ctlp "$W/pipe/${UU[i]}" get_default_active_thread_percentage); cap $(capof "$i") MiB"
	check "GPU $i has a control daemon of its own" "$([ -S "$W/pipe/${UU[i]}/control" ] && [ -n "$d" ]; echo $?)"
done

say
say "## 2. Each GPU: a client of one of its devices (by name on even GPUs, by inventory id on odd ones) lands on it, under its cap"
for i in "${!UU[@]}"; do
	if [ $((i % 2)) = 0 ]; then dev="${UU[i]}::$((NV[i] - 1))"; else dev=$(idof "$i" 0); fi
	run_on "$i" "$dev"
done
say "what a container of ${UU[0]}::0 is given: $(python3 "$C/cdi_env.py" "$SPEC" "${UU[0]}::0" | grep -E 'VISIBLE|LIMIT|PIPE' | tr '\n' ' ')"

say
say "## 3. A client that lifts its own memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=1M) is terminated; its GPU's honest client runs on"
E=$((NG - 1))
in_dev "${UU[E]}::0" -- $CL hold 15 1024 >"$W/honest.log" 2>&1 &
HP=$!
in_dev "${UU[E]}::1" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=1M -- $CL hold 60 1024 >"$W/lifter.log" 2>&1 &
LP=$!
until_ok 60 grep -q started "$W/lifter.log"
until_ok 30 grep -q "cause=limit_escape" "$W/daemon.log"; check "the daemon terminates the lifter (cause limit_escape)" $?
until_ok 30 sh -c "! kill -0 $LP 2>/dev/null"; check "...and it is gone" $? "($(tail -1 "$W/lifter.log"))"
wait "$HP"; check "the honest client of the same GPU ran to its end" "$(grep -q finished "$W/honest.log"; echo $?)" "($(tail -1 "$W/honest.log"))"
grep -E "component=accounting.*(limit|escape)" "$W/daemon.log" | sed 's/^time=[^ ]* //' | head -4 | block

say
say "## 4. kill -9 of GPU 0's control daemon while a client runs on every other GPU"
HOLD=()
for i in "${!UU[@]}"; do
	[ "$i" = 0 ] && continue
	in_dev "${UU[i]}::0" -- $CL hold 20 1024 >"$W/hold4-$i.log" 2>&1 &
	HOLD[i]=$!
done
for i in "${!HOLD[@]}"; do until_ok 60 grep -q started "$W/hold4-$i.log"; done
CP=$(cat "$W/pipe/${UU[0]}/nvidia-cuda-mps-control.pid")
LOGLINES=$(wc -l <"$W/daemon.log")
kill -9 "$CP"; T0=$(date +%s.%N)
# The health probe finds the daemon gone and the same reconcile starts it
# again (tens of milliseconds on a real GPU: the rows are synced after the
# repair, so they need never read unhealthy); the GPU's health in the
# daemon goes false and back. Each poll also checks the other GPUs' rows.
restarted() { others_healthy 0 || { echo "another GPU's rows went unhealthy" >>"$W/section4.log"; return 1; }
	local p; p=$(cat "$W/pipe/${UU[0]}/nvidia-cuda-mps-control.pid" 2>/dev/null); [ -n "$p" ] && [ "$p" != "$CP" ] && kill -0 "$p" 2>/dev/null; }
until_ok 20 restarted; check "GPU 0's control daemon is started again" $? "(PID $CP -> $(cat "$W/pipe/${UU[0]}/nvidia-cuda-mps-control.pid"); $(python3 -c "import time; print(round(time.time()-$T0, 2))") s after the kill, as polled)"
SINCE=$(tail -n +"$((LOGLINES + 1))" "$W/daemon.log")
# Which of the two finds it first, the health probe (GPU health changed)
# or a reconcile, is a race; either restarts the daemon in that reconcile.
check "the daemon restarted GPU 0's control daemon, and touched no other GPU's" "$(echo "$SINCE" | grep 'started again' | grep -q "gpu=${UU[0]} " && ! echo "$SINCE" | grep -E 'GPU health changed|started again' | grep -v "gpu=${UU[0]} " | grep -q .; echo $?)" \
	"($(echo "$SINCE" | grep -E 'GPU health changed|started again' | sed 's/^time=\([^ ]*\).*msg="\([^"]*\)".*gpu=\([^ ]*\).*/\1 \2 \3/' | tr '\n' ';'))"
until_ok 30 gpu_healthy 0; check "GPU 0's rows healthy" $?
others_healthy 0 && [ ! -s "$W/section4.log" ]; check "every other GPU's rows healthy throughout" $?
for i in "${!HOLD[@]}"; do
	wait "${HOLD[i]}"; r=$?
	check "GPU $i's client ran to its end" "$([ $r = 0 ] && grep -q finished "$W/hold4-$i.log"; echo $?)" "($(head -1 "$W/hold4-$i.log"))"
done
run_on 0 "${UU[0]}::0"

say
say "## 5. A live resize of GPU 0 (${NV[0]} -> $((NV[0] + 1))) leaves the other GPUs' servers, clients and rows untouched"
in_dev "${UU[1]}::0" -- $CL hold 15 1024 >"$W/hold5.log" 2>&1 &
VP=$!
until_ok 60 grep -q started "$W/hold5.log"
S1=$(ctlp "$W/pipe/${UU[1]}" get_server_list | head -1)
OTHERS=$(for i in "${!UU[@]}"; do [ "$i" = 0 ] || rows_of "$i"; done)
NV[0]=$((NV[0] + 1)); set_devices
new_row() { [ -n "$(idof 0 $((NV[0] - 1)))" ]; }
until_ok 30 new_row; check "GPU 0 resized to ${NV[0]}" $?
check "GPU 1's MPS server is the same" "$([ "$(ctlp "$W/pipe/${UU[1]}" get_server_list | head -1)" = "$S1" ]; echo $?)" "($S1)"
check "the other GPUs' rows are the same" "$([ "$(for i in "${!UU[@]}"; do [ "$i" = 0 ] || rows_of "$i"; done)" = "$OTHERS" ]; echo $?)"
wait "$VP"; check "GPU 1's client ran to its end" "$(grep -q finished "$W/hold5.log"; echo $?)"
until_ok 30 test -s "$SPEC"
until_ok 30 grep -q "${UU[0]}::$((NV[0] - 1))" "$SPEC"
run_on 0 "${UU[0]}::$((NV[0] - 1))"

say
say "## 6. kill -9 of the agent while a client runs on every GPU: the control daemons and clients live on; ready again with the same rows"
for i in "${!UU[@]}"; do
	in_dev "${UU[i]}::0" -- $CL hold 15 1024 >"$W/hold6-$i.log" 2>&1 &
	HOLD[i]=$!
done
for i in "${!UU[@]}"; do until_ok 60 grep -q started "$W/hold6-$i.log"; done
ROWS=$(all_rows)
CTLS=$(for i in "${!UU[@]}"; do cat "$W/pipe/${UU[i]}/nvidia-cuda-mps-control.pid"; echo; done)
kill -9 "$DPID"; wait "$DPID" 2>/dev/null
T0=$(date +%s.%N)
start_daemon "$W/daemon-restart.log"
wait_ready; check "ready again" $? "($(python3 -c "import time; print(round(time.time()-$T0, 2))") s)"
check "the same rows" "$([ "$(all_rows)" = "$ROWS" ]; echo $?)"
check "the same control daemons" "$([ "$(for i in "${!UU[@]}"; do cat "$W/pipe/${UU[i]}/nvidia-cuda-mps-control.pid"; echo; done)" = "$CTLS" ]; echo $?)"
for i in "${!UU[@]}"; do
	wait "${HOLD[i]}"; r=$?
	check "GPU $i's client ran to its end" "$([ $r = 0 ] && grep -q finished "$W/hold6-$i.log"; echo $?)"
done
kill -TERM "$DPID"; wait "$DPID"
for u in "${UU[@]}"; do ctlp "$W/pipe/$u" quit >/dev/null; done

say
say "## 7. Single layout (Cloudpods' pods): one control daemon for every GPU; each container on its GPU under its cap"
NV[0]=$((NV[0] - 1)); set_devices
write_conf "$W/pipe1" "$W/log1" "mps_pipe_layout: single"
start_daemon "$W/daemon-single.log"
wait_ready; check "daemon ready in the single layout" $?
until_ok 30 grep -q "${UU[0]}::0" "$SPEC"
say "the daemon's device list: $(cat "$W/pipe1/yunion-mps-devices" 2>/dev/null)"
mapfile -t ORDER < <(tr ',' '\n' <"$W/pipe1/yunion-mps-devices")
for k in "${!ORDER[@]}"; do say "ordinal $k (${ORDER[k]}): $(ctlp "$W/pipe1" get_default_device_pinned_mem_limit "$k")"; done
check "the GPU of the largest cap is ordinal 0" "$([ "${ORDER[0]}" = "${UU[0]}" ]; echo $?)" "(GPU 0 has the fewest devices)"
for i in "${!UU[@]}"; do run_on "$i" "${UU[i]}::0"; done
say "A pod of Cloudpods' (its pipe directory alone, no CUDA_VISIBLE_DEVICES) sees every GPU, each under its own cap:"
for k in "${!ORDER[@]}"; do
	g=$(for i in "${!UU[@]}"; do [ "${UU[i]}" = "${ORDER[k]}" ] && echo "$i"; done)
	got=$(env -u CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY=$W/pipe1 $CL alloc "$k" 2>>"$W/clients.log")
	read -r mib uuid <<<"$got"
	check "its ordinal $k is GPU $g, under GPU $g's cap" "$([ "$uuid" = "${UU[g]}" ] && within "$mib" "$(capof "$g")"; echo $?)" "($got; cap $(capof "$g") MiB)"
done
kill -TERM "$DPID"; wait "$DPID"
ctlp "$W/pipe1" quit >/dev/null

say
CM_AFTER=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | tr '\n' ' ')
check "compute modes untouched" "$([ "$CM_BEFORE" = "$CM_AFTER" ]; echo $?)" "($CM_BEFORE -> $CM_AFTER)"
if [ $FAIL = 0 ]; then say "RESULT: all checks passed"; else say "RESULT: FAILURES above"; fi
exit $FAIL
