"""What the machine does fast: which dtype `--dtype auto` means here, and its matmul peak (perf/mfu/actor's
denominator).

On a CPU the answer is measured, not read off the instruction-set name: a bf16 matmul probe against an fp32 one of
the same shape (issue #41). An instruction-set name is not enough: AVX-512 BF16 or AMX may be present but unused by
the build's kernels (or hidden by ONEDNN_MAX_CPU_ISA), and a CPU without them emulates bf16 at ~1% of fp32's speed.
The probe's result is kept per machine in a small file, so every rank of a run (and eval.py after train.py) takes
the same dtype instead of each deciding on its own noisy timing.
"""
import contextlib
import glob
import hashlib
import json
import os
import platform
import tempfile
import time

import torch

from rl import REPO_ROOT

# bf16 is taken when its matmul is at least this much faster than fp32's: where the two are about as fast, fp32's
# precision wins. Measured: native bf16 1.7-3x fp32 (AMD AVX-512 BF16, Intel AMX), emulated 0.01x (AVX2 only).
BF16_MIN_SPEEDUP = 1.25
# The SmolLM2-135M shape that dominates a step (hidden 576 -> MLP 1536) at a micro-batch of tokens.
PROBE_SHAPE = (512, 576, 1536)
# Environment variables that change which matmul kernels run, hence the probe's answer.
KERNEL_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
              "OMP_NUM_THREADS")


def cpu_bf16_matmul_isa() -> str:
    """The CPU's bf16 matmul instructions as oneDNN uses them: 'amx' (Intel Sapphire Rapids and later),
    'avx512_bf16' (e.g. AMD Zen 4, Intel Cooper Lake), or '' when there are none. Recorded beside benchmarks;
    --dtype auto no longer decides by it (measured_bf16_speedup does). Asked of torch itself; /proc/cpuinfo where
    torch cannot say."""
    probes = (("amx", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
    try:
        for isa, probe in probes:
            if getattr(torch.cpu, probe)():
                return isa
        return ""
    except AttributeError:  # a torch without the probes: read the kernel's flags (Linux)
        try:
            with open("/proc/cpuinfo") as f:
                flags = set(next((line for line in f if line.startswith("flags")), "").split())
        except OSError:
            return ""
        return "amx" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_gflops(dtype: torch.dtype, seconds: float = 0.2, shape: tuple = PROBE_SHAPE, device="cpu") -> float:
    """GFLOP/s of `a @ b` with a: [m, k], b: [k, n] in `dtype` on `device` over about `seconds` (after two warm-up
    calls)."""
    m, k, n = shape
    a, b = torch.randn(m, k, device=device).to(dtype), torch.randn(k, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    for _ in range(2):
        a @ b
    sync()
    calls, start = 0, time.perf_counter()
    while True:
        a @ b
        calls += 1
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2 * m * k * n * calls / elapsed / 1e9


# On a GPU the probe needs a shape large enough to fill the device (PROBE_SHAPE is a CPU micro-batch's).
CUDA_PROBE_SHAPE = (8192, 8192, 8192)


def peak_flops(dtype: torch.dtype, device) -> float:
    """One rank's matmul peak in FLOP/s, the denominator of perf/mfu/actor (rl/log/step_metrics.py).

    CPU: the best per-thread rate (fp32 or bf16 at PROBE_SHAPE) among this machine's kept probes (measured_bf16_speedup:
    one per thread setting, all with this CPU, torch and kernel environment), times this rank's threads (credo's
    reading: linear in threads, so two ranks of one thread each share the machine's peak). The best, because a probe
    kept from a loaded machine measured the load, not the peak. NaN for a dtype the probe does not measure (fp16 on a
    CPU). CUDA: a 0.2 s probe at CUDA_PROBE_SHAPE on the device (credo's reading: measured, where verl's FlopsCounter
    divides by the card's datasheet peak)."""
    device = torch.device(device)
    if device.type == "cuda":
        return matmul_gflops(dtype, 0.2, CUDA_PROBE_SHAPE, device) * 1e9
    key = {torch.float32: "fp32_gflops", torch.bfloat16: "bf16_gflops"}.get(dtype)
    if key is None:
        return float("nan")
    records = [measured_bf16_speedup()]
    for path in glob.glob(os.path.join(probe_cache_dir(), "bf16_probe-*.json")):
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                records.append(json.load(f))
    own = records[0]  # records kept before kernel_env was recorded count only as their own key's probe
    same = [own] + [r for r in records[1:] if "kernel_env" in r and all(r.get(k) == own.get(k) for k in SAME_MACHINE)]
    best = max(float(r[key]) / max(int(r.get("threads", 1)), 1) for r in same if key in r)
    return best * 1e9 * torch.get_num_threads()


def probe_bf16(seconds: float = 0.2) -> dict:
    """One measurement: fp32 and bf16 matmul GFLOP/s, their ratio, and what the machine is (for the record)."""
    fp32 = matmul_gflops(torch.float32, seconds)
    bf16 = matmul_gflops(torch.bfloat16, seconds)
    return {"fp32_gflops": round(fp32, 2), "bf16_gflops": round(bf16, 2), "bf16_speedup": round(bf16 / fp32, 3),
            "cpu": cpu_model(), "bf16_isa": cpu_bf16_matmul_isa() or "none", "torch": torch.__version__,
            "threads": torch.get_num_threads(), "load_average": round(os.getloadavg()[0], 2),
            "kernel_env": {v: os.environ.get(v) for v in KERNEL_ENV if v != "OMP_NUM_THREADS"}}


# What two kept probes must share to be probes of one machine (kernel_env: KERNEL_ENV but the thread count)
SAME_MACHINE = ("cpu", "torch", "bf16_isa", "kernel_env")


def probe_cache_dir() -> str:
    """Where the probes are kept: $CREDO_CACHE_DIR or the checkout's .cache/hardware."""
    return os.environ.get("CREDO_CACHE_DIR") or os.path.join(REPO_ROOT, ".cache", "hardware")


def _probe_path(cache_dir: str) -> str:
    key = json.dumps([cpu_model(), torch.__version__, platform.machine(), [os.environ.get(v) for v in KERNEL_ENV]])
    return os.path.join(cache_dir, f"bf16_probe-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json")


def measured_bf16_speedup(cache_dir: str = None) -> dict:
    """probe_bf16()'s record for this machine, measured once and then read from `cache_dir` (default
    $CREDO_CACHE_DIR or the checkout's .cache/hardware). The first process to get the lock measures; the others
    (the ranks of one launch) wait and read its answer. A record that cannot be read is measured again."""
    import fcntl
    cache_dir = cache_dir or probe_cache_dir()
    path = _probe_path(cache_dir)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        lock = open(path + ".lock", "a")
    except OSError:  # a read-only checkout: measure without keeping the answer
        return probe_bf16()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError, KeyError):
            with open(path) as f:
                record = json.load(f)
            float(record["bf16_speedup"])
            return record
        record = probe_bf16()
        fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
        return record


def auto_dtype_name(cuda: bool) -> tuple:
    """(dtype name, why) for --dtype auto: bf16 on CUDA; on a CPU bf16 only where a bf16 matmul measured at least
    BF16_MIN_SPEEDUP times fp32's speed here (measured_bf16_speedup), else fp32."""
    if cuda:
        return "bf16", "CUDA"
    record = measured_bf16_speedup()
    speedup = float(record["bf16_speedup"])
    measured = (f"bf16 matmul measured {speedup:.2f}x fp32's speed on this CPU "
                f"({record['bf16_gflops']:.1f} vs {record['fp32_gflops']:.1f} GFLOP/s, bf16 ISA: {record['bf16_isa']})")
    return ("bf16" if speedup >= BF16_MIN_SPEEDUP else "fp32"), measured
