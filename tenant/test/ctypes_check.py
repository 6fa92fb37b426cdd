"""The view through Python's ctypes, as pynvml (NVML) and cuda-python or
numba (the driver API) reach it: CDLL of the library by soname, each
function looked up by name on the handle (test only). Prints the lines
viewtest prints, way "ctypes"."""
import ctypes
import sys
from ctypes import byref, c_char, c_int, c_size_t, c_uint, c_ulonglong, c_void_p


class Memory(ctypes.Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", c_uint), ("total", c_ulonglong), ("reserved", c_ulonglong),
                ("free", c_ulonglong), ("used", c_ulonglong)]


def check(rc, what):
    if rc != 0:
        print(f"error {what}: {rc}")
        sys.exit(1)


def cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    check(lib.cuInit(0), "cuInit")
    n = c_int()
    check(lib.cuDeviceGetCount(byref(n)), "cuDeviceGetCount")
    for i in range(n.value):
        dev, ctx, uuid = c_int(), c_void_p(), (c_char * 16)()
        check(lib.cuDeviceGet(byref(dev), i), "cuDeviceGet")
        check(lib.cuDeviceGetUuid(uuid, dev), "cuDeviceGetUuid")
        check(lib.cuCtxCreate_v2(byref(ctx), 0, dev), "cuCtxCreate_v2")
        tm, free, total = c_size_t(), c_size_t(), c_size_t()
        tm32, free32, total32 = c_uint(), c_uint(), c_uint()
        check(lib.cuDeviceTotalMem_v2(byref(tm), dev), "cuDeviceTotalMem_v2")
        check(lib.cuDeviceTotalMem(byref(tm32), dev), "cuDeviceTotalMem")
        check(lib.cuMemGetInfo_v2(byref(free), byref(total)), "cuMemGetInfo_v2")
        check(lib.cuMemGetInfo(byref(free32), byref(total32)), "cuMemGetInfo")
        h = bytes(uuid).hex()
        u = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        print(f"cuda {i} {u} ctypes totalmem={tm.value} totalmem32={tm32.value} free={free.value} "
              f"total={total.value} free32={free32.value} total32={total32.value}")


def nvml():
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    check(lib.nvmlInit_v2(), "nvmlInit_v2")
    n = c_uint()
    check(lib.nvmlDeviceGetCount_v2(byref(n)), "nvmlDeviceGetCount_v2")
    for i in range(n.value):
        h, buf = c_void_p(), ctypes.create_string_buffer(96)
        check(lib.nvmlDeviceGetHandleByIndex_v2(i, byref(h)), "nvmlDeviceGetHandleByIndex_v2")
        check(lib.nvmlDeviceGetUUID(h, buf, 96), "nvmlDeviceGetUUID")
        m = Memory()
        check(getattr(lib, "nvmlDeviceGetMemoryInfo")(h, byref(m)), "nvmlDeviceGetMemoryInfo")
        m2 = MemoryV2(version=ctypes.sizeof(MemoryV2) | (2 << 24))
        check(getattr(lib, "nvmlDeviceGetMemoryInfo_v2")(h, byref(m2)), "nvmlDeviceGetMemoryInfo_v2")
        print(f"nvml {i} {buf.value.decode()} ctypes total={m.total} free={m.free} used={m.used} "
              f"v2.total={m2.total} v2.free={m2.free} v2.used={m2.used} v2.reserved={m2.reserved}")


cuda()
nvml()
