"""Start benchmark clients together: the one launcher of bench.py and
qos-probe.py.

Each client (clients/bench_client.py) builds its workload, warms up, writes
<out>.ready, waits for the common start file, runs for `seconds` and writes
its figures to <out> as JSON.
"""
import json
import os
import subprocess
import sys
import time

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients", "bench_client.py")


def run_together(workdir, tag, specs, seconds, client=CLIENT):
    """Runs one client per (workload, env) in specs, all started at once
    once every one is ready; returns their figures in the order of specs.
    A client that fails to start stops them all with its error."""
    tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
    barrier = f"{workdir}/go-{tag}"
    outs, procs = [], []
    for i, (workload, env) in enumerate(specs):
        out = f"{workdir}/{tag}-{i}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, client, workload, str(seconds), barrier, out], env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(out + ".err", "w")))
    deadline = time.time() + 120
    while not all(os.path.exists(o + ".ready") for o in outs):
        if any(p.poll() not in (None, 0) for p in procs) or time.time() > deadline:
            for p in procs:
                p.kill()
            errs = " | ".join(open(o + ".err").read().strip()[-300:] for o in outs)
            raise RuntimeError(f"{tag}: a client failed to start: {errs}")
        time.sleep(0.05)
    open(barrier, "w").close()
    for p in procs:
        p.wait(timeout=seconds + 120)
    return [json.load(open(o)) for o in outs]
