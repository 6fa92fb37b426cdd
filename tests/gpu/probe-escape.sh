#!/usr/bin/env bash
# What the connect-time escape check rests on (issue 39), measured with
# nvidia-cuda-mps-control, a driver-API client (clients/escape_client.c)
# and NVML alone, no daemon of ours:
#   1. when a client's "NEW CLIENT <pid>" line is written to control.log and
#      readable by a follower, against the client's own cuInit, context and
#      first allocation (first client, server starting; then a running server);
#   2. whether a client killed the moment its line is read (environment
#      checked first, start time read before and after) is stopped before
#      it allocates: 20 clients with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x;
#   3. the PID the line carries for a client in its own PID namespace with
#      its own /proc (unshare --pid --fork --mount-proc), and NVML's;
#   4. what the NVML calls a poll can use cost, idle and with clients, and
#      how soon NVML shows a client's memory;
#   5. the in-memory form: setenv of the variable before cuInit.
# Never changes the card's settings. One control daemon, -multiuser-server,
# its own pipe and log directories, default pinned limit 8G.
#   device run: bash tests/gpu/probe-escape.sh
# Output: $OUT/probe-escape.txt (kept as docs/gpu-runs/mps-probe-escape.txt).
set -uo pipefail
OUT=${OUT:-/tmp/probe-escape-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
C=$HERE/clients
R=$OUT/probe-escape.txt
W=$(mktemp -d /tmp/pe.XXXX); chmod 755 "$W"
say() { echo "$*" | tee -a "$R"; }
: >"$R"
BG=()
cleanup() {
	for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null; done
	[ -S "$W/p/control" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$W/p timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
	cp "$W/l/control.log" "$OUT/control.log" 2>/dev/null
	cp "$W/l/server.log" "$OUT/server.log" 2>/dev/null
}
trap cleanup EXIT
say "# The connect-time escape check's facts: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv | tee -a "$R"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
say "timezone: $(date +%Z) (control.log's times are local)"
gcc -O2 -o "$W/ec" "$C/escape_client.c" -ldl 2>&1 | tee -a "$R"
gcc -O2 -o "$W/nc" "$C/nvml_cost.c" -ldl 2>&1 | tee -a "$R"
[ -x "$W/ec" ] && [ -x "$W/nc" ] || { say "RESULT: the clients did not build"; exit 1; }
P=$W/p; L=$W/l; mkdir -p "$P" "$L"; chmod 755 "$P" "$L"
ctl() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$P timeout 10 nvidia-cuda-mps-control 2>&1; }
CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L CUDA_VISIBLE_DEVICES=$UUID nvidia-cuda-mps-control -d -multiuser-server
ctl set_default_device_pinned_mem_limit 0 8G >/dev/null
say "control daemon: -d -multiuser-server, default pinned limit $(ctl get_default_device_pinned_mem_limit 0)"
CE=(env -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT CUDA_MPS_PIPE_DIRECTORY=$P CUDA_VISIBLE_DEVICES=$UUID)
until_line() { # until_line FILE WORD SECONDS
	for _ in $(seq $(($3 * 50))); do grep -q "^$2" "$1" 2>/dev/null && return 0; sleep 0.02; done; return 1; }

say
say "## 4a. NVML calls on an idle GPU (no MPS server, no client)"
"$W/nc" cost "$UUID" 2000 | tee -a "$R"

# timeline CLIENT_OUT... : per client, its own times against its NEW CLIENT
# lines (the log's time) and when the follower read them.
timeline() {
	python3 - "$L/control.log" "$W/follow.out" "$@" <<'PY' | tee -a "$R"
import re, sys, time, datetime
log, follow, outs = sys.argv[1], sys.argv[2], sys.argv[3:]
def ltime(s):
    return datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").timestamp()
lines = {}
for l in open(log, errors="replace"):
    m = re.match(r"\[(\S+ \S+) Control +\d+\] NEW CLIENT (\d+) ", l)
    if m: lines.setdefault(int(m.group(2)), []).append(ltime(m.group(1)))
seen = {}
for l in open(follow, errors="replace"):
    f = l.split()
    if f[0] == "seen":
        m = re.search(r"NEW CLIENT (\d+) ", l)
        seen.setdefault(int(m.group(1)), []).append(float(f[1]))
print("| client | cuInit done | context | allocation done | NEW CLIENT lines (log time) | first line read by the follower | first line to allocation done |")
print("|---|---|---|---|---|---|---|")
ms = lambda x: "%.1f ms" % (x * 1e3)
for o in outs:
    t = {}
    for l in open(o, errors="replace"):
        f = l.split()
        if len(f) >= 2: t.setdefault(f[0], f[1:])
    pid, s = int(t["pid"][0]), float(t["start"][0])
    done = float(t["alloc"][1]) if "alloc" in t else float(t["refused"][1]) if "refused" in t else None
    nl, sn = lines.get(pid, []), seen.get(pid, [])
    print("| %d | %s | %s | %s | %s | %s | %s |" % (pid,
        ms(float(t["init"][0]) - s) if "init" in t else "-", ms(float(t["ctx"][0]) - s) if "ctx" in t else "-",
        ms(done - s) if done else "-", ", ".join(ms(x - s) for x in nl) or "none",
        ms(sn[0] - s) if sn else "-", ms(done - sn[0]) if done and sn else "-"))
print("(every time from the client's own start; the log's times have 1 ms resolution)")
PY
}

say
say "## 1a. The first client: no server yet (it starts one)"
python3 "$C/follow_log.py" "$L/control.log" "$W/follow.out" 60 &
FP=$!; BG+=($FP); until_line "$W/follow.out" ready 30
"${CE[@]}" "$W/ec" alloc 1024 >"$W/c-first.out" 2>&1
sleep 0.2
timeline "$W/c-first.out"

say
say "## 1b. Ten clients of a running server (two others hold 2 GiB each)"
"${CE[@]}" "$W/ec" alloc 2048 120 >"$W/h1.out" 2>&1 &
BG+=($!)
"${CE[@]}" "$W/ec" alloc 2048 120 >"$W/h2.out" 2>&1 &
BG+=($!)
until_line "$W/h1.out" alloc 30; until_line "$W/h2.out" alloc 30
OUTS=()
for k in $(seq 10); do "${CE[@]}" "$W/ec" alloc 1024 >"$W/c-$k.out" 2>&1; OUTS+=("$W/c-$k.out"); done
sleep 0.2
kill -TERM $FP; wait $FP 2>/dev/null
timeline "${OUTS[@]}"

say
say "## 4b. NVML calls with 2 clients"
"$W/nc" cost "$UUID" 2000 | tee -a "$R"
"$W/nc" list "$UUID" | tee -a "$R"

say
say "## 2. Killed when its NEW CLIENT line is read: 20 clients with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x, each asking 14746 MiB (1.8 x 8G)"
python3 "$C/follow_log.py" "$L/control.log" "$W/follow2.out" 60 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x &
FP=$!; BG+=($FP); until_line "$W/follow2.out" ready 30
KO=()
for k in $(seq 20); do
	"${CE[@]}" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x "$W/ec" alloc 14746 1 >"$W/k-$k.out" 2>&1
	echo "rc $?" >>"$W/k-$k.out"; KO+=("$W/k-$k.out")
done
sleep 0.2
kill -TERM $FP; wait $FP 2>/dev/null
python3 - "$W/follow2.out" "${KO[@]}" <<'PY' | tee -a "$R"
import sys
follow, outs = sys.argv[1], sys.argv[2:]
killed = {}
for l in open(follow):
    f = l.split()
    if f[0] == "killed": killed[int(f[2])] = float(f[1])
stages, allocated, kill_ms = {}, 0, []
print("| client | last stage reached | exit | killed after its start |")
print("|---|---|---|---|")
for o in outs:
    t, last = {}, "none"
    for l in open(o, errors="replace"):
        f = l.split()
        if f and f[0] in ("pid", "start", "init", "ctx", "alloc", "refused", "done", "fail", "rc"):
            t[f[0]] = f[1:]
            if f[0] not in ("pid", "rc", "done"): last = f[0]
    pid = int(t["pid"][0]); s = float(t["start"][0])
    if "alloc" in t: allocated += 1
    stages[last] = stages.get(last, 0) + 1
    k = killed.get(pid)
    if k: kill_ms.append((k - s) * 1e3)
    print("| %d | %s | %s | %s |" % (pid, last, t.get("rc", ["?"])[0], "%.1f ms" % ((k - s) * 1e3) if k else "not killed"))
print("allocated past the cap: %d of %d; last stage reached: %s" % (allocated, len(outs), stages))
if kill_ms:
    kill_ms.sort(); print("kill after start: min %.1f ms, median %.1f ms, max %.1f ms" % (kill_ms[0], kill_ms[len(kill_ms)//2], kill_ms[-1]))
PY

say
say "## 5. The in-memory form: setenv(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, x) before cuInit, asking 14746 MiB; NVML watched every 5 ms"
"$W/nc" watch "$UUID" 6 5 >"$W/watch.out" 2>&1 &
WP=$!; BG+=($WP); sleep 0.5
"${CE[@]}" "$W/ec" -e CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x -x 8192 alloc 14746 2 >"$W/mem.out" 2>&1
wait $WP
say "client: $(tr '\n' ' ' <"$W/mem.out")"
python3 - "$W/mem.out" "$W/watch.out" <<'PY' | tee -a "$R"
import sys
t = {l.split()[0]: l.split()[1:] for l in open(sys.argv[1]) if l.strip()}
pid, s = t["pid"][0], float(t["start"][0])
cross = float(t["cross"][0]) if "cross" in t else None
first, over = None, None
for l in open(sys.argv[2]):
    f = l.split()
    if f[0] != "seen": continue
    for e in f[2:]:
        p, mib = e.split(":")
        if p == pid:
            if first is None: first = float(f[1])
            if over is None and int(mib) > 8192: over = float(f[1])
ms = lambda x: "%.1f ms" % (x * 1e3) if x is not None else "-"
print("in-memory escape: %s; NVML first listed it %s after its start (context %s); the client crossed 8192 MiB at %s, NVML showed it over at %s"
      % ("allocated past the cap" if "alloc" in t else "capped", ms(first - s if first else None), ms(float(t["ctx"][0]) - s) if "ctx" in t else "-",
         ms(cross - s if cross else None), ms(over - s if over else None)))
PY
tail -5 "$W/watch.out" | tee -a "$R"

say
say "## 3. A client in its own PID namespace with its own /proc (unshare --pid --fork --mount-proc), asking 9000 MiB under the 8G limit"
unshare --pid --fork --mount-proc "${CE[@]}" "$W/ec" alloc 9000 4 >"$W/ns.out" 2>&1 &
UNS=$!; BG+=($UNS)
until_line "$W/ns.out" refused 30 || until_line "$W/ns.out" alloc 5
HOSTPID=$(awk '{print $1}' "/proc/$UNS/task/$UNS/children" 2>/dev/null)
say "client printed: $(tr '\n' ' ' <"$W/ns.out")"
say "its host PID: $HOSTPID; /proc/$HOSTPID/status NSpid: $(awk '/^NSpid/ {print $2, $3}' "/proc/$HOSTPID/status" 2>/dev/null)"
say "NEW CLIENT lines naming it: $(grep -c "NEW CLIENT $HOSTPID " "$L/control.log"); naming PID 1: $(grep -c 'NEW CLIENT 1 ' "$L/control.log")"
grep -E "NEW CLIENT ($HOSTPID|1) " "$L/control.log" | tail -3 | tee -a "$R"
say "NVML's MPS clients now:"; "$W/nc" list "$UUID" | tee -a "$R"
grep -E "PID: ($HOSTPID|1)," "$L/server.log" | tail -2 | tee -a "$R"
wait $UNS

say
say "## control.log: the lines a client's connection writes (the last client of section 1b)"
LASTPID=$(awk '/^pid/ {print $2}' "$W/c-10.out")
grep -n -B2 -A1 "NEW CLIENT $LASTPID " "$L/control.log" | tee -a "$R"
say "control.log: $(wc -l <"$L/control.log") lines, $(grep -c 'NEW CLIENT' "$L/control.log") NEW CLIENT, $(grep -c 'NEW UI' "$L/control.log") NEW UI"
say "RESULT: done"
