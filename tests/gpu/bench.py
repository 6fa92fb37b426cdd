#!/usr/bin/env python3
"""What MPS sharing buys, what the thread policy changes, what the daemon costs.

One `device` call, under 10 minutes, after `make gpu-bundle`:
    python3 tests/gpu/bench.py        (carry .gpu-bundle; results in $OUT/bench.md)

For N = 1, 4, 8 concurrent clients of two workloads (tests/gpu/clients/
bench_client.py: latency-bound small-batch inference; bursty large batches
with idle gaps) it measures, on one GPU and in one run:
  - time-slicing (no MPS),
  - MPS started by hand: no limits, and thread 100/N + memory total/N,
  - our virtual devices (mps-daemon + inventory, clients given exactly the
    environment of the host's CDI spec) under thread policies none, even
    (100/N), 150/N, 200/N, 300/N; memory total/N throughout,
then (issue 13) one latency-bound client on virtual device 0 beside N-1
clients that saturate the GPU with back-to-back large GEMMs, N = 4 and 8,
under time-slicing, MPS without caps, 100/N, the default, the QoS of a
device YAML entry that names slice 0 a latency slice (`mps_qos`) and every
slice capped at the batch share (the strict variant), then the
daemon's own cost: resident memory and CPU idle and while reconciling, time
from start to READY, and from a saved YAML to the inventory updated.
BENCH_PARTS (identical,noisy,cost) runs a part of it. It never changes the
card's settings.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

from together import run_together

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE = os.path.normpath(os.path.join(HERE, "..", "..", ".gpu-bundle"))
OUT = os.environ.get("OUT", "/tmp/bench-out")
SECONDS = float(os.environ.get("BENCH_SECONDS", "4"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
POLICIES = os.environ.get("BENCH_POLICIES", "none,even,200/N,300/N").split(",")
# BENCH_MODES narrows a run to some modes (e.g. "vdev-none,vdev-400/N") and
# BENCH_NS to some N, for a quick check of one question; the full run is the
# default.
MODES = set(filter(None, os.environ.get("BENCH_MODES", "").split(",")))
NS = [int(x) for x in os.environ.get("BENCH_NS", "1,4,8").split(",")]
WORKLOADS = ["small", "bursty"]
DAEMON_ADDR = "127.0.0.1:19441"
os.makedirs(OUT, exist_ok=True)
W = tempfile.mkdtemp(prefix="/tmp/gb.")
os.chmod(W, 0o755)
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def sh(*cmd, env=None, check=True):
    return subprocess.run(cmd, env=env, check=check, capture_output=True, text=True).stdout


def q(field):
    return sh("nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits").splitlines()[0].strip()


UUID, NAME, MEM_MIB, DRIVER = q("uuid"), q("name"), int(q("memory.total")), q("driver_version")
CTL = shutil.which("nvidia-cuda-mps-control")


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_") and k != "CUDA_VISIBLE_DEVICES"}
    env["CUDA_VISIBLE_DEVICES"] = UUID
    return env


def ctl(pipe, cmd):
    env = base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe}
    return subprocess.run([CTL], input=cmd + "\n", env=env, capture_output=True, text=True, timeout=10).stdout.strip()


def run_clients(label, n, workload, envs):
    """n clients with envs[i]; all start together; aggregate figures."""
    res = run_together(W, f"{label}-{n}-{workload}", [(workload, envs[i]) for i in range(n)], SECONDS)
    r = {"mode": label, "n": n, "workload": workload,
         "steps_per_s": sum(x["steps"] for x in res) / SECONDS,
         "p50_ms": statistics.median(x["p50_ms"] for x in res),
         "p99_ms": max(x["p99_ms"] for x in res),
         "sms": min(x["sms"] for x in res)}
    log(f"{label:>12} N={n} {workload:6} {r['steps_per_s']:9.0f} steps/s  p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  SMs {r['sms']}")
    return r


def hand_mps(limit_threads=None, limit_mib=None, pipe=None):
    """Start a control daemon by hand, as an operator would; return its pipe."""
    pipe = pipe or f"{W}/hp"
    logd = pipe + "-log"
    for d in (pipe, logd):
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
    env = base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logd}
    subprocess.run([CTL, "-d"], env=env, check=True, timeout=20)
    if limit_threads:
        ctl(pipe, f"set_default_active_thread_percentage {limit_threads}")
    if limit_mib:
        ctl(pipe, f"set_default_device_pinned_mem_limit 0 {limit_mib}M")
    return pipe


def quit_mps(pipe):
    ctl(pipe, "quit")
    for _ in range(50):
        if "Cannot find" in subprocess.run([CTL], input="get_server_list\n", capture_output=True, text=True,
                                           env=base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe}).stderr:
            return
        time.sleep(0.1)


results = []
# --- through the daemon --------------------------------------------------

INV_URL = None
TOKEN = None


def mpsctl(*args):
    env = os.environ | {"MPS_INVENTORY_URL": INV_URL, "MPS_INVENTORY_TOKEN": TOKEN}
    return sh(os.path.join(BUNDLE, "mpsctl"), *args, env=env)


def devices():
    return json.loads(mpsctl("-o", "json", "isolated-device-list", "--limit", "100"))["isolated_devices"]


def write_atomic(path, text):
    with open(path + ".new", "w") as f:
        f.write(text)
    os.rename(path + ".new", path)


def write_config(n, policy, latency=None, reserve=None):
    """host.conf with thread policy, the device YAML with N slices and, with
    latency (a list of slices), the entry's QoS (issue 13), with reserve
    when given."""
    write_atomic(f"{W}/host.conf", f"""enable_cuda_mps: true
container_device_config_file: {W}/devices.yml
cuda_mps_pipe_directory: {W}/pipe
cuda_mps_log_directory: {W}/log
mps_inventory_url: {INV_URL}
mps_inventory_token_file: {W}/admin.token
mps_listen_address: {DAEMON_ADDR}
mps_state_directory: {W}/state
mps_cdi_directory: {W}/cdi
mps_set_exclusive_compute_mode: false
mps_host_name: bench
mps_thread_percentage: "{policy}"
mps_health_interval: 2s
""")
    entry = f"devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: {n}\n"
    if latency:
        entry += f"  mps_qos:\n    latency: [{', '.join(map(str, latency))}]\n"
        if reserve is not None:
            entry += f"    reserve: {reserve}\n"
    write_atomic(f"{W}/devices.yml", entry)


def expected_threads(policy, n):
    """ThreadPolicy.Percentage (pkg/vdev/threads.go)."""
    if policy == "none":
        return 100
    if policy == "even":
        return 100 // n
    if policy == "auto":
        policy = "400/N"
    if "/" not in policy:
        return int(policy)  # a fixed percentage
    return min(100, max(1, int(policy.split("/")[0]) // n))


QOS_RESERVE = 8  # mps_qos reserve's default (pkg/config/qos.go)


def expected_device_threads(policy, n, latency=None, reserve=None):
    """Each slice's share, as the daemon computes it (vdev.Split,
    vdev.LatencyShare, vdev.BatchShare): latency slices the even share
    100/N (issue 23), the others (100 - reserve) / (number of batch
    slices); each at least 1, at most the policy's share."""
    p = expected_threads(policy, n)
    if not latency or len(latency) == n:
        return [p] * n
    lat = min(p, max(1, 100 // n))
    batch = min(p, max(1, (100 - (QOS_RESERVE if reserve is None else reserve)) // (n - len(latency))))
    return [lat if i in latency else batch for i in range(n)]


def batch_share(n, reserve=None):
    """The batch share of a GPU of n slices, slice 0 latency, under auto."""
    return expected_device_threads("auto", n, [0], reserve)[1]


def wait_for(cond, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return True
        except Exception:
            pass
        time.sleep(0.05)
    return False


def ready():
    try:
        return urllib.request.urlopen(f"http://{DAEMON_ADDR}/readyz", timeout=2).status == 200
    except Exception:
        return False


def vdev_envs(n):
    spec = yaml.safe_load(open(f"{W}/cdi/yunion.io-mps-gpu.yaml"))
    common = spec.get("containerEdits", {}).get("env", [])
    by_name = {d["name"]: d.get("containerEdits", {}).get("env", []) for d in spec["devices"]}
    envs = []
    for i in range(n):
        env = base_env()
        for kv in common + by_name[f"{UUID}::{i}"]:
            k, v = kv.split("=", 1)
            env[k] = v
        envs.append(env)
    return envs


def start_daemon(logname):
    p = subprocess.Popen([os.path.join(BUNDLE, "mps-daemon"), "--config", f"{W}/host.conf"],
                         stderr=open(f"{W}/{logname}", "w"), stdout=subprocess.DEVNULL)
    return p


def start_services():
    global INV_URL, TOKEN
    inv = subprocess.Popen([os.path.join(BUNDLE, "mps-inventory"), "--listen", "127.0.0.1:0", "--db", f"{W}/inv.db",
                            "--address-file", f"{W}/inv.addr", "--admin-token-file", f"{W}/admin.token"],
                           stderr=open(f"{W}/inventory.log", "w"))
    wait_for(lambda: os.path.getsize(f"{W}/inv.addr") > 0 and os.path.getsize(f"{W}/admin.token") > 0)
    INV_URL, TOKEN = "http://" + open(f"{W}/inv.addr").read().strip(), open(f"{W}/admin.token").read().strip()
    write_config(4, "even")
    daemon = start_daemon("daemon.log")
    if not wait_for(ready, 60):
        raise RuntimeError("daemon not ready: " + open(f"{W}/daemon.log").read()[-2000:])
    return inv, daemon


def only_server(keep):
    """Shut down every idle MPS server but keep's, so one server runs at a time."""
    for pipe in PIPES:
        if pipe == keep:
            continue
        for pid in ctl(pipe, "get_server_list").split():
            ctl(pipe, f"shutdown_server {pid}")


def set_vdev(n, policy, latency=None, reserve=None):
    write_config(n, policy, latency, reserve)
    want = expected_device_threads(policy, n, latency, reserve)
    by_slice = lambda d: sorted((int(x["addr"].rsplit("-", 1)[1]), x["mps_thread_percentage"]) for x in d)
    if not wait_for(lambda: [t for _, t in by_slice(devices())] == want):
        raise RuntimeError(f"inventory never showed {n} devices at {want}%")
    vpipe = f"{W}/pipe/{UUID}"
    for pid in ctl(vpipe, "get_server_list").split():
        ctl(vpipe, f"shutdown_server {pid}")  # the next clients start a server with the new defaults


def bench_rounds(rounds):
    """Every mode in every round; rounds alternate their order, so a drift of
    the GPU over the session (clocks, temperature) falls on every mode."""
    nomps = f"{W}/no-mps"
    os.makedirs(nomps, exist_ok=True)
    hand = {"none": hand_mps(pipe=f"{W}/hp-none")}
    for n in (4, 8):
        hand[n] = hand_mps(100 // n, MEM_MIB // n, pipe=f"{W}/hp-even{n}")
    PIPES.extend([hand["none"], hand[4], hand[8], f"{W}/pipe/{UUID}"])
    vpipe = f"{W}/pipe/{UUID}"
    plan = []
    for n in NS:
        for wl in WORKLOADS:
            plan.append(("time-slicing", n, wl))
            plan.append(("mps-hand", n, wl))
            if n > 1:
                plan.append(("mps-hand-even", n, wl))
                plan += [(f"vdev-{p}", n, wl) for p in POLICIES]
    if MODES:
        plan = [x for x in plan if x[0] in MODES]
    for r in range(rounds):
        order = plan if r % 2 == 0 else list(reversed(plan))
        log(f"round {r + 1} of {rounds}")
        for mode, n, wl in order:
            if mode == "time-slicing":
                only_server(None)
                envs = [base_env() | {"CUDA_MPS_PIPE_DIRECTORY": nomps}] * n
            elif mode == "mps-hand":
                only_server(hand["none"])
                envs = [base_env() | {"CUDA_MPS_PIPE_DIRECTORY": hand["none"]}] * n
            elif mode == "mps-hand-even":
                only_server(hand[n])
                envs = [base_env() | {"CUDA_MPS_PIPE_DIRECTORY": hand[n]}] * n
            else:
                set_vdev(n, mode.removeprefix("vdev-"))
                only_server(vpipe)
                envs = vdev_envs(n)
            results.append(run_clients(mode, n, wl, envs))
    for pipe in (hand["none"], hand[4], hand[8]):
        quit_mps(pipe)


PIPES = []


# --- one latency tenant beside saturating neighbours (issue 13) -------------
NOISY_NS = [int(x) for x in os.environ.get("BENCH_NOISY_NS", "4,8").split(",") if x]
# (label, thread policy, latency slices, mps_qos reserve): None as policy is
# time-slicing; "batch share" is a fixed policy of the batch share of that N
# for every slice, the strictly enforced variant (the victim capped too, by
# MPS). BENCH_NOISY_ONLY (labels, separated by ";") runs some of them.
NOISY_MODES = [("time-slicing", None, None, None), ("MPS, no cap", "none", None, None), ("100/N", "even", None, None),
               ("default (auto, 400/N)", "auto", None, None), ("QoS: slice 0 latency", "auto", [0], None),
               ("QoS: slice 0 latency, reserve 8", "auto", [0], 8), ("QoS: slice 0 latency, reserve 2", "auto", [0], 2),
               ("every slice at the batch share", "batch share", None, None),
               ("every slice at the batch share of reserve 2", "batch share", None, 2)]
if os.environ.get("BENCH_NOISY_ONLY"):
    NOISY_MODES = [m for m in NOISY_MODES if m[0] in os.environ["BENCH_NOISY_ONLY"].split(";")]
NOISY_ROUNDS = int(os.environ.get("BENCH_NOISY_ROUNDS", os.environ.get("BENCH_ROUNDS", "2")))
# The bar of issue 13: victim p99 at most 1.5 times its solo p99 while the
# neighbours keep at least 0.90 of their no-cap throughput.
BAR_P99, BAR_TPUT = 1.5, 0.90
noisy = []


def noisy_run(label, n, envs):
    """Slot 0 runs the latency-bound small workload, the others saturate."""
    specs = [("small" if i == 0 else "saturate", envs[i]) for i in range(n)]
    res = list(zip([wl for wl, _ in specs], run_together(W, f"noisy-{label}-{n}", specs, SECONDS)))
    v = res[0][1]
    r = {"mode": label, "n": n, "p50_ms": v["p50_ms"], "p99_ms": v["p99_ms"], "victim_sms": v["sms"],
         "gemm_per_s": sum(x["steps"] for wl, x in res[1:]) * 4 / SECONDS,
         "neighbour_sms": min((x["sms"] for wl, x in res[1:]), default=None)}
    log(f"noisy {label:>24} N={n} victim p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} ms (SMs {r['victim_sms']}) "
        f"| neighbours {r['gemm_per_s']:.1f} GEMM/s (SMs {r['neighbour_sms']})")
    noisy.append(r)


def bench_noisy(rounds):
    vpipe = f"{W}/pipe/{UUID}"
    nomps = f"{W}/no-mps"
    os.makedirs(nomps, exist_ok=True)
    for r in range(rounds):
        log(f"noisy neighbour, round {r + 1} of {rounds}")
        # The victim alone on a device without caps: the figure its p99 is compared to.
        set_vdev(NOISY_NS[0], "none")
        only_server(vpipe)
        noisy_run("solo", 1, vdev_envs(1))
        modes = NOISY_MODES if r % 2 == 0 else list(reversed(NOISY_MODES))
        for n in NOISY_NS:
            for label, policy, latency, reserve in modes:
                if policy is None:
                    only_server(None)
                    envs = [base_env() | {"CUDA_MPS_PIPE_DIRECTORY": nomps}] * n
                else:
                    set_vdev(n, str(batch_share(n, reserve)) if policy == "batch share" else policy, latency, reserve)
                    only_server(vpipe)
                    envs = vdev_envs(n)
                noisy_run(label, n, envs)


def noisy_report():
    med = lambda xs: statistics.median(xs) if xs else 0.0
    solo = [r for r in noisy if r["mode"] == "solo"]
    solo_p50, solo_p99 = med([r["p50_ms"] for r in solo]), med([r["p99_ms"] for r in solo])
    lines = ["## One latency tenant beside saturating neighbours", "",
             f"Slot 0 runs the small workload, the other N-1 slots back-to-back 8192^3 fp16 GEMMs; clients get "
             f"exactly their device's CDI environment. Victim alone (no cap): p50 {solo_p50:.3f} ms, p99 {solo_p99:.3f} ms. "
             f"Medians over {NOISY_ROUNDS} round(s). bar: victim p99 at most {BAR_P99} x solo and neighbours at least "
             f"{BAR_TPUT} x no cap (issue 13).", "",
             "| N | mode | victim p50 ms | victim p99 ms | p99 / solo | neighbours GEMM/s | vs no cap | SMs victim / neighbour | bar |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in NOISY_NS:
        rows = {m[0]: [r for r in noisy if r["mode"] == m[0] and r["n"] == n] for m in NOISY_MODES}
        nocap = med([r["gemm_per_s"] for r in rows["MPS, no cap"]])
        for label, *_ in NOISY_MODES:
            rs = rows[label]
            if not rs:
                continue
            p99, tput = med([r["p99_ms"] for r in rs]), med([r["gemm_per_s"] for r in rs])
            ok = p99 / solo_p99 <= BAR_P99 and tput / nocap >= BAR_TPUT
            lines.append(f"| {n} | {label} | {med([r['p50_ms'] for r in rs]):.3f} | {p99:.3f} | {p99 / solo_p99:.2f} | "
                         f"{tput:.1f} | {tput / nocap:.3f} | {rs[0]['victim_sms']} / {rs[0]['neighbour_sms']} | "
                         f"{'meets' if ok else 'misses'} |")
    return lines


# --- the daemon's own cost ------------------------------------------------

def proc_cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0


def proc_rss_kinds_mib(pid):
    """RssAnon (heaps: Go's and NVML's malloc), RssFile (mapped files: the
    binary, libc, libnvidia-ml.so) and RssShmem, in MiB (issue 22)."""
    kinds = {}
    for line in open(f"/proc/{pid}/status"):
        key = line.split(":")[0]
        if key in ("RssAnon", "RssFile", "RssShmem"):
            kinds[key] = int(line.split()[1]) / 1024
    return kinds


def daemon_cost(daemon):
    cost = {}
    write_config(4, "auto")
    wait_for(lambda: len(devices()) == 4)
    time.sleep(3)
    c0 = proc_cpu_s(daemon.pid)
    time.sleep(20)
    cost["idle_cpu_percent"] = (proc_cpu_s(daemon.pid) - c0) / 20 * 100
    cost["idle_rss_mib"] = proc_rss_mib(daemon.pid)
    for k, v in proc_rss_kinds_mib(daemon.pid).items():
        cost[f"idle_{k.lower()}_mib"] = v
    lat = []
    c0 = proc_cpu_s(daemon.pid)
    for k in range(10):
        n = 5 if k % 2 == 0 else 4
        t = time.time()
        write_config(n, "auto")
        if not wait_for(lambda: len(devices()) == n, 10):
            raise RuntimeError("an edit did not reach the inventory")
        lat.append(time.time() - t)
    cost["cpu_ms_per_reconcile"] = (proc_cpu_s(daemon.pid) - c0) / 10 * 1000
    cost["rss_after_reconciles_mib"] = proc_rss_mib(daemon.pid)
    cost["edit_to_inventory_ms_p50"] = statistics.median(lat) * 1000
    cost["edit_to_inventory_ms_max"] = max(lat) * 1000
    # Restart: adopts the running control daemon.
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    t = time.time()
    daemon = start_daemon("daemon-restart.log")
    wait_for(ready, 60)
    cost["start_to_ready_adopting_ms"] = (time.time() - t) * 1000
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    # Cold: no control daemon yet.
    quit_mps(f"{W}/pipe/{UUID}")
    t = time.time()
    daemon = start_daemon("daemon-cold.log")
    wait_for(ready, 60)
    cost["start_to_ready_cold_ms"] = (time.time() - t) * 1000
    return cost, daemon


def table(rows, header):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def aggregate():
    """Median over the rounds of each (mode, N, workload), with the spread."""
    samples = {}
    for r in results:
        samples.setdefault((r["mode"], r["n"], r["workload"]), []).append(r)
    by = {}
    for k, rs in samples.items():
        sp = [x["steps_per_s"] for x in rs]
        by[k] = {"steps_per_s": statistics.median(sp), "min": min(sp), "max": max(sp),
                 "p50_ms": statistics.median(x["p50_ms"] for x in rs),
                 "p99_ms": statistics.median(x["p99_ms"] for x in rs), "sms": rs[0]["sms"]}
    return by


def report(cost):
    by = aggregate()
    lines = [f"# MPS benchmark: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"{NAME}, {MEM_MIB} MiB, driver {DRIVER}; {SECONDS:g} s per run, {ROUNDS} rounds in alternating order, "
             "medians (min-max of steps/s); clients: CuPy, fp16.", ""]
    for wl in WORKLOADS:
        single = by[("time-slicing", 1, wl)]["steps_per_s"]
        lines += [f"## {wl}", "", f"One client alone: {single:.0f} steps/s (the ceiling for N clients is N times that).", ""]
        rows = []
        for n in (1, 4, 8):
            ts = by[("time-slicing", n, wl)]["steps_per_s"]
            hand = by.get(("mps-hand", n, wl), {}).get("steps_per_s")
            for mode in ["time-slicing", "mps-hand", "mps-hand-even"] + [f"vdev-{p}" for p in POLICIES]:
                r = by.get((mode, n, wl))
                if not r:
                    continue
                rows.append([n, mode, f"{r['steps_per_s']:.0f} ({r['min']:.0f}-{r['max']:.0f})", f"{r['steps_per_s'] / (n * single):.2f}",
                             f"{r['steps_per_s'] / ts:.2f}", f"{r['steps_per_s'] / hand:.2f}" if hand else "",
                             f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}", r["sms"]])
        lines += [table(rows, ["N", "mode", "steps/s", "of ceiling", "vs time-slicing", "vs MPS by hand",
                               "p50 ms", "p99 ms", "SMs per client"]), ""]
    lines += ["## Policy check: each policy against the better of none and even (100/N)", ""]
    rows = []
    for p in POLICIES:
        worst = 9.0
        cells = []
        for n in (4, 8):
            for wl in WORKLOADS:
                best = max(by[("vdev-none", n, wl)]["steps_per_s"], by[("vdev-even", n, wl)]["steps_per_s"])
                ratio = by[(f"vdev-{p}", n, wl)]["steps_per_s"] / best
                worst = min(worst, ratio)
                cells.append(f"{ratio:.3f}")
        rows.append([p] + cells + [f"{worst:.3f}"])
    lines += [table(rows, ["policy", "small N=4", "bursty N=4", "small N=8", "bursty N=8", "worst"]), ""]
    lines += ["## Virtual devices against MPS by hand with the same settings", ""]
    rows = []
    for n in (4, 8):
        for wl in WORKLOADS:
            rows.append([n, wl, f"{by[('vdev-none', n, wl)]['steps_per_s'] / by[('mps-hand', n, wl)]['steps_per_s']:.3f}",
                         f"{by[('vdev-even', n, wl)]['steps_per_s'] / by[('mps-hand-even', n, wl)]['steps_per_s']:.3f}"])
    lines += [table(rows, ["N", "workload", "vdev-none / hand, no limits", "vdev-even / hand, 100/N"]), ""]
    if cost:
        lines += ["## The daemon's own cost (real GPU, 1 GPU, 4-5 virtual devices)", "",
                  table([[k, f"{v:.1f}"] for k, v in cost.items()], ["figure", "value"]), ""]
    if noisy:
        lines += noisy_report() + [""]
    open(f"{OUT}/bench.md", "w").write("\n".join(lines) + "\n")
    json.dump({"results": results, "cost": cost, "noisy": noisy}, open(f"{OUT}/bench.json", "w"), indent=1)
    print("\n".join(lines))


def policy_check(by):
    """Each policy against the better of none and even, from whatever ran."""
    rows = []
    for p in POLICIES:
        cells, worst = [], 9.0
        for n in (4, 8):
            for wl in WORKLOADS:
                keys = [(f"vdev-{x}", n, wl) for x in (p, "none", "even")]
                if not all(k in by for k in keys):
                    cells.append("")
                    continue
                ratio = by[keys[0]]["steps_per_s"] / max(by[keys[1]]["steps_per_s"], by[keys[2]]["steps_per_s"])
                worst = min(worst, ratio)
                cells.append(f"{ratio:.3f}")
        rows.append([p] + cells + [f"{worst:.3f}" if worst < 9 else ""])
    return ["## Identical clients: each policy against the better of none and even (100/N)", "",
            table(rows, ["policy", "small N=4", "bursty N=4", "small N=8", "bursty N=8", "worst"]), ""]


def main():
    """BENCH_PARTS picks what runs: identical (N identical clients per mode),
    noisy (one latency tenant beside saturating neighbours), cost (the
    daemon's own). All by default; a run narrowed with BENCH_MODES prints the
    raw medians and the policy check instead of the full tables."""
    parts = set(os.environ.get("BENCH_PARTS", "identical,noisy,cost").split(","))
    log(f"{NAME} {UUID} {MEM_MIB} MiB driver {DRIVER}; parts {sorted(parts)}")
    inv = daemon = None
    try:
        inv, daemon = start_services()
        if "identical" in parts:
            bench_rounds(ROUNDS)
        if "noisy" in parts:
            bench_noisy(NOISY_ROUNDS)
        if MODES or "identical" not in parts or "cost" not in parts:
            by = aggregate()
            lines = [f"# MPS benchmark (partial: {sorted(parts)}): {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
                     f"{NAME}, {MEM_MIB} MiB, driver {DRIVER}; {SECONDS:g} s per run.", ""]
            if by:
                lines += ["| mode | N | workload | steps/s (min-max) | p50 ms | p99 ms | SMs |", "|---|---|---|---|---|---|---|"]
                for (m, n, wl), v in sorted(by.items()):
                    lines.append(f"| {m} | {n} | {wl} | {v['steps_per_s']:.0f} ({v['min']:.0f}-{v['max']:.0f}) | "
                                 f"{v['p50_ms']:.3f} | {v['p99_ms']:.3f} | {v['sms']} |")
                lines += [""] + policy_check(by)
            if noisy:
                lines += noisy_report()
            open(f"{OUT}/bench.md", "w").write("\n".join(lines) + "\n")
            json.dump({"results": results, "noisy": noisy}, open(f"{OUT}/bench.json", "w"), indent=1)
            print("\n".join(lines))
            return
        cost, daemon = daemon_cost(daemon)
        report(cost)
    finally:
        for p in (daemon, inv):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
        quit_mps(f"{W}/pipe/{UUID}")
        for f in ("daemon.log", "inventory.log"):
            if os.path.exists(f"{W}/{f}"):
                shutil.copy(f"{W}/{f}", OUT)
        log("done")


if __name__ == "__main__":
    main()
