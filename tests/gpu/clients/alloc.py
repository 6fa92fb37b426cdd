# Allocates 256 MiB blocks until the GPU (or MPS) refuses; prints the MiB it got.
import torch
n, bufs = 0, []
try:
    while True:
        bufs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        n += 256
except RuntimeError:
    pass
print(n)
