# A client that allocates MIB of GPU memory, says so, then sleeps SECONDS
# without calling CUDA again (an idle container process).
import sys, time, torch
mib, seconds = int(sys.argv[1]), float(sys.argv[2])
keep = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("allocated", flush=True)
time.sleep(seconds)
print("woke", flush=True)
