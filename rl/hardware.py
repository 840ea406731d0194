"""What the machine does fast: which dtype `--dtype auto` means here."""
import torch


def cpu_bf16_matmul_isa() -> str:
    """The CPU's bf16 matmul instructions as oneDNN uses them: 'amx' (Intel Sapphire Rapids and later),
    'avx512_bf16' (e.g. AMD Zen 4, Intel Cooper Lake), or '' when there are none (bf16 is then emulated and slower
    than fp32). Asked of torch itself, which is what decides the kernels; /proc/cpuinfo where torch cannot say."""
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


def auto_dtype_name(cuda: bool) -> tuple:
    """(dtype name, why) for --dtype auto: bf16 on CUDA and on CPUs with bf16 matmul instructions, else fp32.
    Measured on 2-core CPUs: a credo step 1.7x (AMD, AVX-512 BF16) to 2x (Intel, AMX) faster in bf16."""
    if cuda:
        return "bf16", "CUDA"
    isa = cpu_bf16_matmul_isa()
    if isa:
        return "bf16", f"CPU with {isa}"
    return "fp32", "CPU without bf16 matmul instructions (AMX or AVX-512 BF16)"
