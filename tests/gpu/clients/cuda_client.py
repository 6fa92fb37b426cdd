# A CUDA client through the driver API (libcuda, ctypes): no framework to
# import, so it starts in a fraction of a second and shows exactly which
# driver call failed. Modes:
#   init               prints "ok <n> <uuid>..." (the GPUs the client sees,
#                      in its own ordinal order, after a context on ordinal 0)
#                      or "fail <call> <CUDA error name>"
#   alloc [ORDINAL]    allocates 256 MiB blocks on ORDINAL (default 0) until
#                      the driver refuses; prints "<MiB> <uuid of ORDINAL>",
#                      or "fail <call> <error>" when it got no context at all
#   hold SECONDS MIB   allocates MIB on ordinal 0, prints "started <uuid>",
#                      keeps it SECONDS, prints "finished"; "fail ..." if the
#                      allocation is refused
# The exit status is 0 for ok/alloc/hold that got a context, 1 otherwise.
import ctypes
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")


def err_name(rc):
    s = ctypes.c_char_p()
    if cuda.cuGetErrorName(rc, ctypes.byref(s)) == 0 and s.value:
        return s.value.decode()
    return "CUDA_ERROR_%d" % rc


class Fail(Exception):
    pass


def call(name, *args):
    rc = getattr(cuda, name)(*args)
    if rc != 0:
        raise Fail("%s %s" % (name, err_name(rc)))


def uuid_of(dev):
    raw = (ctypes.c_ubyte * 16)()
    fn = "cuDeviceGetUuid_v2" if hasattr(cuda, "cuDeviceGetUuid_v2") else "cuDeviceGetUuid"
    call(fn, raw, dev)
    h = bytes(raw).hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def context(ordinal):
    call("cuInit", 0)
    n = ctypes.c_int()
    call("cuDeviceGetCount", ctypes.byref(n))
    dev = ctypes.c_int()
    call("cuDeviceGet", ctypes.byref(dev), ordinal)
    ctx = ctypes.c_void_p()
    call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    call("cuCtxSetCurrent", ctx)
    uuids = []
    for i in range(n.value):
        d = ctypes.c_int()
        call("cuDeviceGet", ctypes.byref(d), i)
        uuids.append(uuid_of(d))
    return uuids, uuid_of(dev)


def alloc_until_refused(limit_mib=None):
    got, ptrs = 0, []
    while limit_mib is None or got < limit_mib:
        p = ctypes.c_uint64()
        step = 256 if limit_mib is None else min(256, limit_mib - got)
        if cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(step << 20)) != 0:
            break
        ptrs.append(p)
        got += step
    return got, ptrs


def main(argv):
    mode = argv[1] if len(argv) > 1 else "init"
    try:
        if mode == "init":
            uuids, _ = context(0)
            print("ok", len(uuids), *uuids)
        elif mode == "alloc":
            _, u = context(int(argv[2]) if len(argv) > 2 else 0)
            got, _ = alloc_until_refused()
            print(got, u)
        elif mode == "hold":
            seconds, mib = float(argv[2]), int(argv[3])
            _, u = context(0)
            got, _ = alloc_until_refused(mib)
            if got < mib:
                print("fail cuMemAlloc_v2 refused at %d of %d MiB" % (got, mib), flush=True)
                return 1
            print("started", u, flush=True)
            time.sleep(seconds)
            print("finished", flush=True)
        else:
            sys.exit("unknown mode " + mode)
    except Fail as e:
        print("fail", e, flush=True)
        return 1
    return 0


sys.exit(main(sys.argv))
