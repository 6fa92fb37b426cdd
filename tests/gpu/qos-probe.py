#!/usr/bin/env python3
"""Probe for issue 13: what MPS offers against a noisy neighbour.

One latency-bound client (the "small" workload of clients/bench_client.py) as
the victim, N-1 saturating clients (back-to-back large GEMMs) beside it, on
control daemons started by hand in their own pipe directories. For each
setting: the victim's p50/p99 step latency against its solo run, and the
neighbours' aggregate GEMM throughput against no cap. Then what the control
binary and libcuda know of priorities and partitions (strings), and whether a
client's environment can raise a priority the server's default lowered.

    python3 tests/gpu/qos-probe.py     (results in $OUT/qos-probe.md)
    QOS_PARTS=running python3 tests/gpu/qos-probe.py   (only: does a running
        server follow a default priority set after it started? ~1 minute)

Never changes the card's settings.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from together import run_together

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("OUT", "/tmp/qos-out")
SECONDS = float(os.environ.get("QOS_SECONDS", "4"))
NS = [int(x) for x in os.environ.get("QOS_NS", "8,4").split(",")]
PARTS = set(os.environ.get("QOS_PARTS", "settings,running,strings").split(","))
os.makedirs(OUT, exist_ok=True)
W = tempfile.mkdtemp(prefix="/tmp/qos.")
os.chmod(W, 0o755)
T0 = time.time()
CTL = shutil.which("nvidia-cuda-mps-control")
LINES = []


def log(*a):
    line = " ".join(str(x) for x in a)
    print(f"[{time.time() - T0:6.1f}s] {line}", flush=True)
    LINES.append(line)


def q(field):
    return subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout.splitlines()[0].strip()


UUID, NAME, DRIVER = q("uuid"), q("name"), q("driver_version")


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_") and k != "CUDA_VISIBLE_DEVICES"}
    env["CUDA_VISIBLE_DEVICES"] = UUID
    return env


def ctl(pipe, cmd):
    r = subprocess.run([CTL], input=cmd + "\n", env=base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe},
                       capture_output=True, text=True, timeout=10)
    return (r.stdout + r.stderr).strip()


def start_mps(name, thread=None, priority=None):
    pipe, logd = f"{W}/{name}-pipe", f"{W}/{name}-log"
    for d in (pipe, logd):
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
    subprocess.run([CTL, "-d"], env=base_env() | {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logd},
                   check=True, timeout=20)
    said = []
    if thread is not None:
        said.append(ctl(pipe, f"set_default_active_thread_percentage {thread}"))
    if priority is not None:
        said.append(ctl(pipe, f"set_default_client_priority {priority}"))
    return pipe, said


def quit_mps(pipe):
    ctl(pipe, "quit")
    for _ in range(100):
        if "Cannot find" in ctl(pipe, "get_server_list"):
            return
        time.sleep(0.1)


def run(label, n, pipe, victim_env, neighbour_env, victim=True):
    """Victim (small) on slot 0 unless victim=False, saturating neighbours on
    the others; all start together."""
    specs = []
    for i in range(n):
        wl = "small" if (i == 0 and victim) else "saturate"
        env = base_env()
        if pipe:
            env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
        specs.append((wl, env | (victim_env if wl == "small" else neighbour_env)))
    res = list(zip([wl for wl, _ in specs], run_together(W, f"{label}-{n}", specs, SECONDS)))
    v = [r for wl, r in res if wl == "small"]
    nb = [r for wl, r in res if wl == "saturate"]
    r = {"label": label, "n": n,
         "victim_p50": v[0]["p50_ms"] if v else None, "victim_p99": v[0]["p99_ms"] if v else None,
         "victim_steps": v[0]["steps"] / SECONDS if v else None, "victim_sms": v[0]["sms"] if v else None,
         "gemm_per_s": sum(x["steps"] for x in nb) * 4 / SECONDS if nb else 0,
         "neighbour_sms": min(x["sms"] for x in nb) if nb else None}
    log(f"{label:34} N={n} victim p50 {r['victim_p50'] or 0:.3f} p99 {r['victim_p99'] or 0:.3f} ms "
        f"(SMs {r['victim_sms']}) | neighbours {r['gemm_per_s']:.1f} GEMM/s (SMs {r['neighbour_sms']})")
    return r


def strings_probe():
    lines = ["## What the control binary and libcuda name", ""]
    try:
        lines.append("control version: " + subprocess.run([CTL, "-v"], capture_output=True, text=True, timeout=10).stdout.strip()[:200])
    except Exception as e:
        lines.append(f"control -v: {e}")
    libcuda = subprocess.run("ldconfig -p | awk '/libcuda.so.1/{print $NF; exit}'", shell=True, capture_output=True, text=True).stdout.strip()
    for path, pat in ((CTL, r"priority|partition|sm_|_default_|lspart|mkpart|static"), (libcuda, r"CUDA_MPS_[A-Z_]+")):
        if not path:
            continue
        out = subprocess.run(f"strings -n 6 {path} | grep -E -o '{pat}[A-Za-z_]*' | sort -u | head -80",
                             shell=True, capture_output=True, text=True).stdout.split()
        lines.append(f"{os.path.basename(path)}: " + " ".join(out))
    pipe, _ = start_mps("strings")
    for c in ("get_default_client_priority", "set_default_client_priority 1", "get_default_client_priority",
              "set_default_client_priority 2", "get_default_client_priority", "help", "lspart", "sm_partition"):
        lines.append(f"`{c}` -> {ctl(pipe, c)[:300]!r}")
    quit_mps(pipe)
    # Static partitioning mode: does -S exist on this driver?
    spipe = f"{W}/static-pipe"
    os.makedirs(spipe, exist_ok=True)
    r = subprocess.run([CTL, "-d", "-S"], env=base_env() | {"CUDA_MPS_PIPE_DIRECTORY": spipe, "CUDA_MPS_LOG_DIRECTORY": spipe},
                       capture_output=True, text=True, timeout=20)
    lines.append(f"`nvidia-cuda-mps-control -d -S` -> rc {r.returncode} {(r.stdout + r.stderr).strip()[:300]!r}")
    if r.returncode == 0:
        for c in ("lspart", "sm_partition list", "help"):
            lines.append(f"static `{c}` -> {ctl(spipe, c)[:300]!r}")
        quit_mps(spipe)
    return lines


def running_server_probe(n):
    """Does a server that runs when set_default_client_priority changes
    follow the new default? The control has no per-server priority command,
    so mps-daemon restarts idle servers after a change; this says whether
    that is needed. A server is started at default 0 by a short client (it
    outlives it), then the default becomes 1 and the victim (env priority 0)
    runs beside n-1 neighbours with no priority variable: about 12x solo p99
    if they got priority 1 from the new default, about 190x if the running
    server kept 0. Then the same after shutdown_server, as the control."""
    rows = []
    pipe, _ = start_mps("running")
    run("start a server at default priority 0", 1, pipe, {}, {})
    servers = ctl(pipe, "get_server_list").split()
    ctl(pipe, "set_default_client_priority 1")
    log(f"servers before the change: {servers}; default now {ctl(pipe, 'get_default_client_priority')}")
    rows.append(run("running server, default changed to 1", n, pipe, {"CUDA_MPS_CLIENT_PRIORITY": "0"}, {}))
    rows[-1]["servers"] = (servers, ctl(pipe, "get_server_list").split())
    for pid in ctl(pipe, "get_server_list").split():
        ctl(pipe, f"shutdown_server {pid}")
    time.sleep(1)
    rows.append(run("new server after shutdown_server", n, pipe, {"CUDA_MPS_CLIENT_PRIORITY": "0"}, {}))
    rows[-1]["servers"] = (servers, ctl(pipe, "get_server_list").split())
    quit_mps(pipe)
    return rows


def main():
    log(f"{NAME} {UUID} driver {DRIVER}; {SECONDS:g} s per run; parts {sorted(PARTS)}")
    rows = []
    sp = []
    try:
        pipe, _ = start_mps("nocap")
        solo = run("solo victim, MPS no cap", 1, pipe, {}, {})
        quit_mps(pipe)
        if "running" in PARTS:
            rows += running_server_probe(max(NS))
        for n in (NS if "settings" in PARTS else []):
            even = 100 // n
            base = []
            rows.append(run("time-slicing", n, None, {}, {}))
            configs = [
                ("MPS no cap", None, None, {}, {}),
                (f"100/N ({even}%) all", even, None, {}, {}),
                (f"default 400/N ({min(100, 400 // n)}%) all", min(100, 400 // n), None, {}, {}),
                ("neighbours priority 1", None, None, {}, {"CUDA_MPS_CLIENT_PRIORITY": "1"}),
            ]
            for r_ in (4, 8, 12):
                cap = (100 - r_) // (n - 1)
                configs.append((f"neighbours cap {cap}% (sum {cap * (n - 1)})", None, None, {},
                                {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(cap)}))
                configs.append((f"neighbours cap {cap}% + prio 1", None, None, {},
                                {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(cap), "CUDA_MPS_CLIENT_PRIORITY": "1"}))
            configs.append((f"400/N all + neighbours prio 1", min(100, 400 // n), None, {}, {"CUDA_MPS_CLIENT_PRIORITY": "1"}))
            # Can a client raise the priority the server's default lowered?
            configs.append(("server prio 1, victim env 0", None, 1, {"CUDA_MPS_CLIENT_PRIORITY": "0"}, {}))
            configs.append(("server prio 1, all env 0", None, 1, {"CUDA_MPS_CLIENT_PRIORITY": "0"}, {"CUDA_MPS_CLIENT_PRIORITY": "0"}))
            for label, thread, prio, venv, nenv in configs:
                pipe, said = start_mps("c", thread, prio)
                r = run(label, n, pipe, venv, nenv)
                r["said"] = said
                rows.append(r)
                quit_mps(pipe)
            pipe, _ = start_mps("nv")
            rows.append(run("neighbours alone, no cap", n, pipe, {}, {}, victim=False))
            quit_mps(pipe)
    finally:
        if "strings" in PARTS:
            sp = strings_probe()
    nocap = {r["n"]: r["gemm_per_s"] for r in rows if r["label"] == "MPS no cap"}
    for r in rows:  # the running-server part has no no-cap run of its own
        nocap.setdefault(r["n"], r["gemm_per_s"] or 1)
    md = [f"# QoS probe: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
          f"{NAME}, driver {DRIVER}; {SECONDS:g} s per run, one round. Victim solo (MPS, no cap): "
          f"p50 {solo['victim_p50']:.3f} ms, p99 {solo['victim_p99']:.3f} ms, {solo['victim_steps']:.0f} steps/s.", "",
          "| N | setting | victim p50 ms | victim p99 ms | p99 / solo | neighbours GEMM/s | vs no cap | victim SMs | neighbour SMs |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p99 = r["victim_p99"]
        md.append(f"| {r['n']} | {r['label']} | {r['victim_p50'] or 0:.3f} | {p99 or 0:.3f} | "
                  f"{(p99 / solo['victim_p99']) if p99 else 0:.2f} | {r['gemm_per_s']:.1f} | "
                  f"{r['gemm_per_s'] / nocap[r['n']]:.3f} | {r['victim_sms']} | {r['neighbour_sms']} |"
                  + (f" servers before / after: {r['servers'][0]} / {r['servers'][1]}" if "servers" in r else ""))
    md += [""] + sp
    open(f"{OUT}/qos-probe.md", "w").write("\n".join(md) + "\n")
    json.dump({"solo": solo, "rows": rows}, open(f"{OUT}/qos-probe.json", "w"), indent=1)
    print("\n".join(md))


if __name__ == "__main__":
    main()
