# Allocates 256 MiB blocks until the GPU (or MPS) refuses; prints the MiB it got.
# The error that stopped it goes to stderr (the cap's out-of-memory, or why
# the client got no GPU at all).
import sys
import torch
n, bufs = 0, []
try:
    while True:
        bufs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        n += 256
except RuntimeError as e:
    print(str(e).splitlines()[0][:200], file=sys.stderr)
print(n)
