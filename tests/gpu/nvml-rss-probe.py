#!/usr/bin/env python3
"""Which NVML call maps libcuda into the caller, and what each costs in RSS.

Issue 22: the daemon's RSS on an H100 shows libcuda.so mapped and about
20 MiB of anonymous memory while Go's heap holds 4. This loads
libnvidia-ml.so.1 alone (ctypes, no CUDA), makes the calls the daemon's
NVML adapter makes (pkg/gpu/nvml), and after each prints RssAnon, RssFile
and whether libcuda is mapped. Run on the GPU host:
    python3 tests/gpu/nvml-rss-probe.py
"""
import ctypes

def status():
    f = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("RssAnon", "RssFile", "Threads"):
            f[k] = v.strip()
    maps = open("/proc/self/maps").read()
    f["libcuda"] = "libcuda" in maps
    return f

def show(what):
    print(f"{what:45s} {status()}")

show("python, before NVML")
nvml = ctypes.CDLL("libnvidia-ml.so.1")
show("libnvidia-ml.so.1 loaded")
assert nvml.nvmlInit_v2() == 0
show("nvmlInit_v2")
h = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
show("nvmlDeviceGetHandleByIndex_v2")
buf = ctypes.create_string_buffer(96)
nvml.nvmlDeviceGetUUID(h, buf, 96); show("nvmlDeviceGetUUID")
nvml.nvmlDeviceGetName(h, buf, 96); show("nvmlDeviceGetName")
pci = ctypes.create_string_buffer(128)
nvml.nvmlDeviceGetPciInfo_v3(h, pci); show("nvmlDeviceGetPciInfo_v3")
mem = ctypes.create_string_buffer(64)
nvml.nvmlDeviceGetMemoryInfo(h, mem); show("nvmlDeviceGetMemoryInfo")
u = ctypes.c_uint()
nvml.nvmlDeviceGetMinorNumber(h, ctypes.byref(u)); show("nvmlDeviceGetMinorNumber")
nvml.nvmlDeviceGetArchitecture(h, ctypes.byref(u)); show("nvmlDeviceGetArchitecture")
nvml.nvmlDeviceGetComputeMode(h, ctypes.byref(u)); show("nvmlDeviceGetComputeMode")
n = ctypes.c_uint(64)
procs = ctypes.create_string_buffer(64 * 64)
for name in ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2", "nvmlDeviceGetMPSComputeRunningProcesses"):
    fn = getattr(nvml, name, None)
    if fn is not None:
        n.value = 64
        rc = fn(h, ctypes.byref(n), procs)
        show(f"{name} rc={rc}")
        break
for _ in range(10):
    n.value = 64
    fn(h, ctypes.byref(n), procs)
show("... 10 more times")
nvml.nvmlShutdown(); show("nvmlShutdown")
