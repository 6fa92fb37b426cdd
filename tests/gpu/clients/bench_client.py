# One benchmark client (CuPy: it starts in about a second, so 8 clients and
# dozens of runs fit one session). Builds the workload, warms up, says it is
# ready, waits for the common start signal, runs for SECONDS, writes figures.
#   small:  batch 8 through six 2048x2048 fp16 layers, synchronize each step
#           (latency-bound inference)
#   bursty: batch 512 through four 4096x4096 fp16 layers, then 2 ms idle
#   saturate: back-to-back 8192x8192x8192 fp16 GEMMs, four queued per
#           synchronize, no idle gap (a training-like noisy neighbour)
import json, os, sys, time
import cupy as cp

workload, seconds, barrier, out = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
if workload == "small":
    batch, dim, layers, idle = 8, 2048, 6, 0.0
elif workload == "saturate":
    batch, dim, layers, idle = 8192, 8192, 4, 0.0
else:
    batch, dim, layers, idle = 512, 4096, 4, 0.002
rng = cp.random.default_rng(0)
ws = [(rng.standard_normal((dim, dim), dtype=cp.float32) / dim**0.5).astype(cp.float16) for _ in range(layers)]
x0 = rng.standard_normal((batch, dim), dtype=cp.float32).astype(cp.float16)
dev = cp.cuda.Device()

def step():
    x = x0
    for w in ws:
        x = x @ w if workload == "saturate" else cp.maximum(x @ w, 0)
    dev.synchronize()

for _ in range(3 if workload == "saturate" else 20):
    step()
open(out + ".ready", "w").close()
deadline = time.time() + 120
while not os.path.exists(barrier):
    if time.time() > deadline:
        sys.exit("no start signal")
    time.sleep(0.0005)
lat = []
t_end = time.perf_counter() + seconds
while True:
    t0 = time.perf_counter()
    if t0 >= t_end:
        break
    step()
    lat.append(time.perf_counter() - t0)
    if idle:
        time.sleep(idle)
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
json.dump({"steps": len(lat), "seconds": seconds, "p50_ms": q(0.50), "p99_ms": q(0.99), "sms": sms}, open(out, "w"))
