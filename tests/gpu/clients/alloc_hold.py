# Allocates 256 MiB blocks until the GPU (or MPS) refuses, prints
# "reached N" (the MiB it got), holds them for SECONDS, then prints
# "finished" and exits 0. The error that stopped the allocation goes to
# stderr; any other CUDA error prints "died: ..." and exits 3.
import sys, time
import torch
seconds = float(sys.argv[1])
x = torch.ones(1 << 20, device="cuda")  # before the cap is reached
n, bufs = 0, []
try:
    while True:
        bufs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        n += 256
except RuntimeError as e:
    print(str(e).splitlines()[0][:200], file=sys.stderr)
print("reached", n, flush=True)
try:
    t0 = time.time()
    while time.time() - t0 < seconds:
        x = x * 1.0000001
        torch.cuda.synchronize()
        time.sleep(0.05)
    print("finished", flush=True)
except Exception as e:
    print("died:", type(e).__name__, str(e).splitlines()[0][:160], flush=True)
    sys.exit(3)
