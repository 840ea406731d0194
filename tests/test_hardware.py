"""--dtype auto: bf16 where the hardware multiplies bf16 fast, fp32 elsewhere, and the choice is printed."""
import torch

from rl import hardware
from rl.config import parse_args


def test_auto_is_bf16_on_cuda_and_on_cpus_with_bf16_matmul_instructions(monkeypatch):
    assert hardware.auto_dtype_name(cuda=True)[0] == "bf16"
    for isa, want in (("amx", "bf16"), ("avx512_bf16", "bf16"), ("", "fp32")):
        monkeypatch.setattr(hardware, "cpu_bf16_matmul_isa", lambda isa=isa: isa)
        assert hardware.auto_dtype_name(cuda=False)[0] == want


def test_the_isa_probe_agrees_with_the_kernel_flags():
    with open("/proc/cpuinfo") as f:
        flags = set(next(line for line in f if line.startswith("flags")).split())
    isa = hardware.cpu_bf16_matmul_isa()
    assert (isa != "") == bool(flags & {"amx_bf16", "avx512_bf16"})


def test_parse_args_resolves_auto_and_says_what_it_chose(tiny_model_dir, capsys):
    args = parse_args(["--model_name_or_path", tiny_model_dir])
    want = hardware.auto_dtype_name(torch.cuda.is_available())[0]
    assert args.dtype == want
    assert f"--dtype auto: {want}" in capsys.readouterr().out
