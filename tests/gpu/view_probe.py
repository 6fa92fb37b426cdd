"""What software asks about a GPU's memory, each the way it does (issue 38,
tests/gpu/view-probe.sh). One mode a process; prints "key value" lines.
  torch     torch.cuda.mem_get_info, get_device_properties(0).total_memory,
            vLLM's start rule (free >= 0.9 x total), then what vLLM would
            take (0.9 x total less what is used) allocated and a matmul run
  jax       JAX with its defaults (preallocation of 0.75 x total)
  cupy      cupy.cuda.runtime.memGetInfo, getDeviceProperties totalGlobalMem
  nvml      pynvml if installed, else NVML through ctypes as pynvml does
  bench ROLE DIR ROUNDS SECONDS
            small PyTorch steps (batch 8 through six 2048x2048 fp16 layers,
            synchronized each step), SECONDS each round, a round when
            DIR/go.ROLE.N appears; steps/s of each round into DIR/ROLE.N
            (tests/gpu/view-probe.sh)
  serve ROLE DIR [CPU]
            the blocks tests/gpu/abba.py asks for, one at a time: reads
            "g N" (N small PyTorch steps as bench's) or "c N" (a CPU-bound
            Python loop of N iterations, no CUDA) from the FIFO
            DIR/cmd.ROLE, answers each with its seconds on DIR/res.ROLE;
            "q" ends it. Once warmed up (200 steps), every thread of the
            process is pinned to core CPU ("-": none), and only then is
            DIR/ready.ROLE made: the imports and CUDA start of many clients
            run in parallel, their blocks on one core
  serve-fake ROLE DIR CPU FACTOR NOISE SEED
            serve without PyTorch or a GPU, for abba.py's self-test
            (tests/gpu/abba_selftest.py): "g N" is a busy loop of
            N x 1000 x FACTOR x (1 + NOISE x a normal draw, seeded by SEED)
            iterations, timed for real
"""
import os
import sys
import time

MIB = 1 << 20


def maps_view():
    with open("/proc/self/maps") as f:
        return int("libyunion-mps-view.so" in f.read())


def driver_direct():
    """The driver API through ctypes (dlsym on libcuda.so.1's handle), as
    cuda-python and numba reach it, in the context PyTorch made current."""
    import ctypes
    from ctypes import byref, c_int, c_size_t
    lib = ctypes.CDLL("libcuda.so.1")
    dev, tm, free, total = c_int(), c_size_t(), c_size_t(), c_size_t()
    rc1 = lib.cuCtxGetDevice(byref(dev))
    rc2 = lib.cuDeviceTotalMem_v2(byref(tm), dev)
    rc3 = lib.cuMemGetInfo_v2(byref(free), byref(total))
    print("driver.totalmem", tm.value, f"(rc {rc1} {rc2})")
    print("driver.total", total.value, f"(rc {rc3})")
    print("driver.free", free.value)


def mapped(name):
    with open("/proc/self/maps") as f:
        for line in f:
            if name in line:
                return line.split()[-1]
    return "-"


def torch_mode():
    import torch
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0)
    print("torch.free", free)
    print("torch.total", total)
    print("torch.total_memory", props.total_memory)
    print("maps.view", maps_view())
    print("maps.cudart", mapped("libcudart"))
    print("maps.cuda", mapped("libcuda.so"))
    print("maps.nvml", mapped("libnvidia-ml"))
    try:
        driver_direct()
    except Exception as e:  # noqa: BLE001
        print("driver.error", e)
    rule = free >= 0.9 * total
    print("vllm.rule", int(rule), f"(free {free // MIB} MiB, 0.9 x total {int(0.9 * total) // MIB} MiB)")
    if not rule:
        return
    take = int(0.9 * total) - (total - free)
    try:
        block = torch.empty(take, dtype=torch.uint8, device="cuda")
        a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
        c = a @ a
        torch.cuda.synchronize()
        print("vllm.alloc", 1, f"({take // MIB} MiB taken, matmul ran, sum {float(c.float().abs().sum()):.3g})")
        del block
    except Exception as e:  # noqa: BLE001 - reported, not raised
        print("vllm.alloc", 0, f"({take // MIB} MiB: {str(e).splitlines()[0][:200]})")


def jax_mode():
    t0 = time.time()
    try:
        import jax
        import jax.numpy as jnp
        x = jnp.ones((1024, 1024), dtype=jnp.float32)
        y = (x @ x).block_until_ready()
        st = jax.devices()[0].memory_stats() or {}
        print("jax.ok", 1, f"(sum {float(y.sum()):.3g}, {time.time() - t0:.1f} s)")
        print("jax.bytes_limit", st.get("bytes_limit", -1))
        print("jax.pool_bytes", st.get("pool_bytes", -1))
        print("jax.bytes_reserved", st.get("bytes_reserved", -1))
    except Exception as e:  # noqa: BLE001
        msg = " ".join(str(e).split())[:300]
        print("jax.ok", 0, f"({type(e).__name__}: {msg})")
        return
    # What the pool is for: one array of 0.9 x its limit, as a program
    # filling the memory JAX took at start would.
    n = int(0.9 * st.get("bytes_limit", 0)) // 4
    try:
        z = jnp.zeros((n,), dtype=jnp.float32).block_until_ready()
        print("jax.fill", 1, f"({n * 4 >> 20} MiB in one array)")
        del z
    except Exception as e:  # noqa: BLE001
        msg = " ".join(str(e).split())[:200]
        print("jax.fill", 0, f"({n * 4 >> 20} MiB: {type(e).__name__}: {msg})")


def cupy_mode():
    import cupy
    free, total = cupy.cuda.runtime.memGetInfo()
    print("cupy.free", free)
    print("cupy.total", total)
    print("cupy.totalGlobalMem", cupy.cuda.runtime.getDeviceProperties(0)["totalGlobalMem"])


def nvml_mode():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        print("nvml.via", "pynvml", pynvml.__file__)
        print("nvml.total", m.total)
        print("nvml.free", m.free)
        print("nvml.used", m.used)
        try:
            m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            print("nvml.v2.total", m2.total)
            print("nvml.v2.reserved", m2.reserved)
        except Exception as e:  # noqa: BLE001
            print("nvml.v2", "unavailable", e)
        return
    except ImportError:
        pass
    import ctypes
    from ctypes import byref, c_uint, c_ulonglong, c_void_p

    class Mem(ctypes.Structure):
        _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]

    class Mem2(ctypes.Structure):
        _fields_ = [("version", c_uint), ("total", c_ulonglong), ("reserved", c_ulonglong),
                    ("free", c_ulonglong), ("used", c_ulonglong)]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.nvmlInit_v2()
    h = c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(0, byref(h))
    m, m2 = Mem(), Mem2(version=ctypes.sizeof(Mem2) | (2 << 24))
    rc1 = lib.nvmlDeviceGetMemoryInfo(h, byref(m))
    rc2 = lib.nvmlDeviceGetMemoryInfo_v2(h, byref(m2))
    print("nvml.via", "ctypes", rc1, rc2)
    print("nvml.total", m.total)
    print("nvml.free", m.free)
    print("nvml.used", m.used)
    print("nvml.v2.total", m2.total)
    print("nvml.v2.reserved", m2.reserved)


def small_step():
    """One step of the small-kernel workload both throughput methods time:
    batch 8 through six 2048x2048 fp16 layers, synchronized (CPU-bound:
    the launch path is what a library in the process could slow)."""
    import torch
    torch.manual_seed(0)
    ws = [torch.randn(2048, 2048, dtype=torch.float16, device="cuda") / 45 for _ in range(6)]
    x0 = torch.randn(8, 2048, dtype=torch.float16, device="cuda")

    def step():
        x = x0
        for w in ws:
            x = torch.relu(x @ w)
        torch.cuda.synchronize()

    return step


def bench_mode(role, d, rounds, seconds):
    step = small_step()
    for _ in range(50):
        step()
    open(os.path.join(d, f"ready.{role}"), "w").close()
    for r in range(rounds):
        go = os.path.join(d, f"go.{role}.{r}")
        deadline = time.time() + 120
        while not os.path.exists(go):
            if time.time() > deadline:
                sys.exit("no start signal")
            time.sleep(0.002)
        n, t_end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            step()
            n += 1
        rate = n / (time.perf_counter() - t0)
        with open(os.path.join(d, f"{role}.{r}.tmp"), "w") as f:
            f.write(f"{rate:.1f}\n")
        os.rename(os.path.join(d, f"{role}.{r}.tmp"), os.path.join(d, f"{role}.{r}"))


def pin(cpu):
    """Every thread of this process (PyTorch's and the driver's included) on
    core cpu; threads made later inherit it."""
    if cpu == "-":
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {int(cpu)})
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


def cpu_loop(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def serve_loop(role, d, cpu, gpu_block):
    """Pins, says ready, then answers abba.py's blocks until "q"."""
    cpu_loop(100000)
    pin(cpu)
    open(os.path.join(d, f"ready.{role}"), "w").close()
    with open(os.path.join(d, f"cmd.{role}")) as cmd, open(os.path.join(d, f"res.{role}"), "w") as res:
        for line in cmd:
            kind, n = (line.split() + ["0"])[:2]
            n = int(n)
            if kind == "q":
                break
            t0 = time.perf_counter()
            if kind == "g":
                gpu_block(n)
            else:
                cpu_loop(n)
            res.write(f"{time.perf_counter() - t0:.9f}\n")
            res.flush()


def serve_mode(role, d, cpu):
    step = small_step()

    def gpu_block(n):
        for _ in range(n):
            step()

    for _ in range(200):
        step()
    serve_loop(role, d, cpu, gpu_block)


def serve_fake_mode(role, d, cpu, factor, noise, seed):
    import random
    rng = random.Random(seed)

    def gpu_block(n):
        cpu_loop(max(1, int(n * 1000 * factor * (1 + noise * rng.gauss(0, 1)))))

    serve_loop(role, d, cpu, gpu_block)


mode = sys.argv[1]
if mode == "torch":
    torch_mode()
elif mode == "jax":
    jax_mode()
elif mode == "cupy":
    cupy_mode()
elif mode == "nvml":
    nvml_mode()
elif mode == "bench":
    bench_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
elif mode == "serve":
    serve_mode(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "-")
elif mode == "serve-fake":
    serve_fake_mode(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]))
else:
    sys.exit(f"unknown mode {mode}")
