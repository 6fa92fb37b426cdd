# A CUDA client that holds HOLD_MIB of memory and computes for SECONDS, then
# prints "finished N <time>" and exits 0; any CUDA error prints "died: ..." and exits 3.
import os, sys, time
if os.environ.get("RUN_AS_UID"):  # a container of another user
    uid = int(os.environ["RUN_AS_UID"])
    os.setgid(uid)
    os.setuid(uid)
import torch
seconds, hold_mib = float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0
try:
    keep = torch.empty(hold_mib << 20, dtype=torch.uint8, device="cuda") if hold_mib else None
    x = torch.ones(1 << 20, device="cuda")
    t0, n = time.time(), 0
    print("started", time.time(), "uid", os.getuid(), flush=True)
    while time.time() - t0 < seconds:
        x = x * 1.0000001
        torch.cuda.synchronize()
        n += 1
    print("finished", n, time.time(), flush=True)
except Exception as e:
    print("died:", type(e).__name__, str(e).splitlines()[0][:160], flush=True)
    sys.exit(3)
