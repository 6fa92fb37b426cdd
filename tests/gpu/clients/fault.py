# A client that triggers an illegal address (a fatal GPU exception), then
# lingers for a few seconds so the server stays in FAULT meanwhile.
import sys, time, cupy as cp
linger = float(sys.argv[1]) if len(sys.argv) > 1 else 4
k = cp.RawKernel(r'''extern "C" __global__ void bad(int *p) { p[threadIdx.x] = 1; }''', 'bad')
try:
    k((1,), (32,), (cp.uint64(0xdead0000),))
    cp.cuda.runtime.deviceSynchronize()
    print("no fault?", flush=True)
except Exception as e:
    print("faulted:", type(e).__name__, flush=True)
time.sleep(linger)
