#!/usr/bin/env python3
"""Issue 23's QoS tables in one short GPU run (about 3 minutes on an H100).

    python3 tests/gpu/qos23.py        (after `make gpu-bundle`; results in $OUT/qos23.md)

run.sh calls it last, so `bash tests/gpu/run.sh` gives the suite and these
tables in one device call. It reuses bench.py's machinery (the daemon and
inventory from .gpu-bundle, clients given exactly their device's CDI
environment, the victim's small workload beside saturating neighbours).

1. Through the daemon, N = 4 and 8: MPS without caps, 100/N (`even`) and
   `mps_qos: {latency: [0]}` under the default thread policy (the latency
   slice at the even share, 100/N, priority 0; the batch slices at
   (100 - 4) / (N - 1), priority 1), against the victim alone: victim p99,
   x solo, neighbours x no cap, and whether the setting dominates 100/N
   (victim p99 no worse, neighbours better) and meets the bar (<= 1.5x
   solo, >= 0.90 of no cap).
2. Part A of issue 23, by hand at N = 8: the shares the old `mps_qos` gave
   (victim 50% priority 0, neighbours 13% priority 1, all from the
   clients' environment), under a control daemon set up plainly (as the
   by-hand probe did: 0.29 ms), then with one thing the daemon does added
   at a time (its server defaults 50% and priority 1; -multiuser-server;
   memory caps per client), then all three (what the daemon did: 0.53 ms).
   The row that moves the victim's p99 names the cause.
3. What the MPS control of this driver offers beyond thread shares and
   priorities: its version, help text, and whether static SM partitioning
   (`-S`, control 13010 and later per NVIDIA's documentation) starts.

It never changes the card's settings (compute mode untouched).
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (bench's module level only reads the GPU and makes a work directory)

SECONDS = float(os.environ.get("QOS23_SECONDS", "4"))
NS = [int(x) for x in os.environ.get("QOS23_NS", "4,8").split(",") if x]
PARTS = set(os.environ.get("QOS23_PARTS", "daemon,causes,mechanisms").split(","))
B.SECONDS = SECONDS
REPORT = []
BAR_P99, BAR_TPUT = 1.5, 0.90


def say(*lines):
    """Prints lines and appends them to $OUT/qos23.md at once, so a run cut
    short by the device's time limit still brings back what it measured."""
    with open(f"{B.OUT}/qos23.md", "a") as f:
        for line in lines:
            print(line, flush=True)
            REPORT.append(line)
            f.write(line + "\n")


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0


# --- 1. through the daemon -----------------------------------------------

# QOS23_RESERVES: the mps_qos reserves tried (the default first), each a row;
# QOS23_ROUNDS: rounds of every setting, in alternating order, medians reported.
# The first is the row "mps_qos latency [0]"; none given: the daemon's default reserve.
RESERVES = [int(x) for x in os.environ.get("QOS23_RESERVES", "").split(",") if x] or [None]
ROUNDS = int(os.environ.get("QOS23_ROUNDS", "1"))
DAEMON_MODES = [("no cap", "none", None, None), ("100/N", "even", None, None)] + [
    ("mps_qos latency [0]" + ("" if r == RESERVES[0] else f" reserve {r}"), "auto", [0], r) for r in RESERVES]


def daemon_part():
    vpipe = f"{B.W}/pipe/{B.UUID}"
    B.PIPES.append(vpipe)
    for rnd in range(ROUNDS):
        B.set_vdev(4, "none")
        B.only_server(vpipe)
        B.noisy_run("solo", 1, B.vdev_envs(1))
        modes = DAEMON_MODES if rnd % 2 == 0 else list(reversed(DAEMON_MODES))
        for n in NS:
            daemon_round(vpipe, n, modes)


def daemon_round(vpipe, n, modes):
    for label, policy, latency, reserve in modes:
        B.set_vdev(n, policy, latency, reserve)
        B.only_server(vpipe)
        envs = B.vdev_envs(n)
        shares = [e.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") + "/" + e.get("CUDA_MPS_CLIENT_PRIORITY") for e in envs[:2]]
        B.noisy_run(f"{label} (victim {shares[0]}, neighbours {shares[1]})" if latency else label, n, envs)
        B.noisy[-1]["setting"] = label
        if latency:
            B.noisy[-1]["defaults"] = f"{B.ctl(vpipe, 'get_default_active_thread_percentage')}% / priority {B.ctl(vpipe, 'get_default_client_priority')}"


def daemon_table():
    solo = med([r["p99_ms"] for r in B.noisy if r["mode"] == "solo"])
    say("## 1. Through the daemon: 100/N against mps_qos", "",
        f"{B.NAME}, driver {B.DRIVER}; {SECONDS:g} s per run, median of {ROUNDS} round(s) in alternating order; victim alone p99 {solo:.3f} ms. "
        "Victim: batch 8 through six 2048x2048 fp16 layers, synchronize each step; neighbours: back-to-back "
        "8192^3 fp16 GEMMs. Every client has exactly its device's CDI environment; memory caps total/N; "
        "`mps_accounting: enforce`; -multiuser-server.", "",
        "| N | setting | victim p50 ms | victim p99 ms | x solo | neighbours GEMM/s | x no cap | SMs victim / neighbour | dominates 100/N | bar (<= 1.5x, >= 0.90) |",
        "|---|---|---|---|---|---|---|---|---|---|")
    for n in NS:
        rows = {}
        for label, _, _, _ in DAEMON_MODES:
            runs = [r for r in B.noisy if r["n"] == n and r.get("setting") == label]
            if runs:
                rows[label] = dict(runs[0], p50_ms=med([r["p50_ms"] for r in runs]), p99_ms=med([r["p99_ms"] for r in runs]),
                                   gemm_per_s=med([r["gemm_per_s"] for r in runs]))
        nocap, even = rows.get("no cap"), rows.get("100/N")
        for label, _, _, _ in DAEMON_MODES:
            r = rows.get(label)
            if not r or not nocap:
                continue
            x, t = r["p99_ms"] / solo, r["gemm_per_s"] / nocap["gemm_per_s"]
            dom = ""
            if label.startswith("mps_qos") and even:
                dom = "yes" if r["p99_ms"] <= even["p99_ms"] and r["gemm_per_s"] > even["gemm_per_s"] else "no"
            bar = "meets" if x <= BAR_P99 and t >= BAR_TPUT else "misses"
            say(f"| {n} | {r['mode']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {x:.2f} | {r['gemm_per_s']:.1f} | {t:.3f} | "
                f"{r['victim_sms']} / {r['neighbour_sms']} | {dom} | {bar} |")
    say("")
    for n in NS:
        q = next((r for r in B.noisy if r["n"] == n and r.get("defaults")), None)
        if q:
            say(f"- N = {n}: the control daemon's defaults under mps_qos, read back: {q['defaults']}")
    say("")


# --- 2. Part A: what in the daemon's set-up costs the victim ----------------

def start_control(name, multiuser=False, thread=None, priority=None, mem_mib=None):
    pipe, logd = f"{B.W}/{name}-pipe", f"{B.W}/{name}-log"
    for d in (pipe, logd):
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
    env = B.base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logd}
    subprocess.run([B.CTL, "-d"] + (["-multiuser-server"] if multiuser else []), env=env, check=True, timeout=20)
    said = []
    if thread is not None:
        said.append(B.ctl(pipe, f"set_default_active_thread_percentage {thread}"))
    if priority is not None:
        said.append(B.ctl(pipe, f"set_default_client_priority {priority}"))
    if mem_mib is not None:
        said.append(B.ctl(pipe, f"set_default_device_pinned_mem_limit 0 {mem_mib}M"))
    B.PIPES.append(pipe)
    return pipe, [s for s in said if s]


CAUSES = [  # label, multiuser, server defaults (thread, priority), memory caps
    ("plain control daemon (the by-hand probe)", False, (None, None), False),
    ("+ server defaults 50% and priority 1", False, (50, 1), False),
    ("+ -multiuser-server", True, (None, None), False),
    ("+ memory caps (server default and client variable)", False, (None, None), True),
    ("all three (the daemon's set-up)", True, (50, 1), True),
]


def done_with(pipe):
    B.quit_mps(pipe)
    B.PIPES.remove(pipe)


def causes_part(n=8):
    mem = B.MEM_MIB // n
    pipe, _ = start_control("a-nocap")
    B.only_server(pipe)
    if not any(r["mode"] == "solo" for r in B.noisy):
        B.noisy_run("solo", 1, [B.base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe}])
    B.noisy_run("by hand, no cap", n, [B.base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe}] * n)
    done_with(pipe)
    for i, (label, multiuser, (thread, prio), caps) in enumerate(CAUSES):
        pipe, said = start_control(f"a{i}", multiuser, thread, prio, mem if caps else None)
        base = B.base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe}
        if caps:
            base["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mem}M"
        victim = base | {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_CLIENT_PRIORITY": "0"}
        neighbour = base | {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "13", "CUDA_MPS_CLIENT_PRIORITY": "1"}
        B.only_server(pipe)
        B.noisy_run(label, n, [victim] + [neighbour] * (n - 1))
        if said:
            B.noisy[-1]["said"] = said
        done_with(pipe)


def causes_table(n=8):
    solo = med([r["p99_ms"] for r in B.noisy if r["mode"] == "solo"])
    nocap = next((r for r in B.noisy if r["mode"] == "by hand, no cap"), None)
    say(f"## 2. Part A: the old mps_qos shares by hand (victim 50% / 0, neighbours 13% / 1), N = {n}", "",
        "Each row adds one thing the daemon does to a control daemon started by hand; the last has all of them. "
        "Neighbours against the same control daemon by hand without caps.", "",
        "| set-up | victim p50 ms | victim p99 ms | x solo | neighbours x no cap | SMs victim / neighbour |",
        "|---|---|---|---|---|---|")
    for label, *_ in CAUSES:
        r = next((x for x in B.noisy if x["mode"] == label), None)
        if not r or not nocap:
            continue
        say(f"| {label} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['p99_ms'] / solo:.2f} | "
            f"{r['gemm_per_s'] / nocap['gemm_per_s']:.3f} | {r['victim_sms']} / {r['neighbour_sms']} |")
    say("")
    for r in B.noisy:
        if r.get("said"):
            say(f"- {r['mode']}: the control answered {r['said']}")
    say("")


# --- 3. what the control offers -------------------------------------------

def run_ctl(args, pipe, stdin=None, timeout=10):
    env = B.base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": pipe}
    try:
        r = subprocess.run([B.CTL] + args, input=stdin or "", env=env, capture_output=True, text=True, timeout=timeout)
        # written \0: this control's "Unrecognized option" prints a NUL,
        # which made the reports binary to git and grep (qos23-2026-11-29-*)
        return r.returncode, (r.stdout + r.stderr).strip().replace("\0", "\\0")
    except subprocess.TimeoutExpired:
        return 124, "timed out"


def mechanisms():
    pipe = f"{B.W}/mech-pipe"
    os.makedirs(pipe, exist_ok=True)
    say("## 3. What this driver's MPS control offers", "")
    rc, out = run_ctl(["-v"], pipe)
    say(f"- `nvidia-cuda-mps-control -v` -> rc {rc}: `{out[:200]}`")
    for args in (["-h"], ["--help"]):
        rc, out = run_ctl(args, pipe)
        say(f"- `nvidia-cuda-mps-control {' '.join(args)}` -> rc {rc}:", "```", out[:3000], "```")
    rc, out = run_ctl(["-d", "-S"], pipe, timeout=20)
    # The control exits 0 on an option it does not know: read what it says.
    static = rc == 0 and "Unrecognized option" not in out
    say(f"- `nvidia-cuda-mps-control -d -S` (static SM partitioning) -> rc {rc}: `{out[:300]}`")
    if not static:
        rc, out = run_ctl(["-d"], pipe, timeout=20)
    for cmd in ("help", "sm_partition list", "lspart", "get_default_client_priority"):
        rc2, out2 = run_ctl([], pipe, stdin=cmd + "\n")
        say(f"- control command `{cmd}` -> `{out2[:1500]}`")
    run_ctl([], pipe, stdin="quit\n")
    say("", "Static SM partitioning: " + ("**offered by this control** (not yet used by mps-daemon)." if static else
        "not offered by this control (`-S` refused): the mechanism that would give each slice SMs of its own is missing here."), "")


def main():
    # timeout(1) sends SIGTERM: stop as on an error, so the daemons and MPS
    # control daemons started here are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    open(f"{B.OUT}/qos23.md", "w").close()
    say(f"# Issue 23 QoS run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "")
    inv = daemon = None
    t0 = time.time()
    try:
        if "mechanisms" in PARTS:
            mechanisms()
        if "daemon" in PARTS:
            inv, daemon = B.start_services()
            daemon_part()
            daemon_table()
            # Part A runs without the daemon polling the GPU.
            for p in (daemon, inv):
                p.terminate()
                p.wait(timeout=30)
            vpipe = f"{B.W}/pipe/{B.UUID}"
            B.quit_mps(vpipe)
            B.PIPES.remove(vpipe)
        if "causes" in PARTS:
            causes_part()
            causes_table()
    finally:
        for p in (daemon, inv):
            if p and p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
        for pipe in list(B.PIPES):
            B.quit_mps(pipe)
        say(f"(took {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
