"""--dtype auto: bf16 where a bf16 matmul measured faster than fp32 here, fp32 elsewhere, and the choice is printed."""
import json
import os

import pytest
import torch

from rl.engine import hardware
from rl.config import parse_args


def test_auto_follows_the_measured_speedup_not_the_instruction_set(monkeypatch):
    assert hardware.auto_dtype_name(cuda=True)[0] == "bf16"
    for speedup, isa, want in ((2.1, "avx512_bf16", "bf16"), (0.01, "avx512_bf16", "fp32"), (1.0, "amx", "fp32"),
                               (1.9, "none", "bf16")):
        record = {"bf16_speedup": speedup, "bf16_gflops": speedup * 50, "fp32_gflops": 50.0, "bf16_isa": isa}
        monkeypatch.setattr(hardware, "measured_bf16_speedup", lambda record=record: record)
        name, why = hardware.auto_dtype_name(cuda=False)
        assert name == want, (speedup, isa)
        assert f"{speedup:.2f}x" in why


def test_the_probe_is_measured_once_per_machine_and_then_read(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(hardware, "probe_bf16", lambda: calls.append(1) or {"bf16_speedup": 0.5, "bf16_gflops": 1,
                                                                           "fp32_gflops": 2, "bf16_isa": "none"})
    first = hardware.measured_bf16_speedup(str(tmp_path))
    assert hardware.measured_bf16_speedup(str(tmp_path)) == first and len(calls) == 1
    # a record that cannot be read (a crash mid-write before the atomic rename existed, a hand edit) is re-measured
    (path,) = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    path.write_text("{not json")
    assert hardware.measured_bf16_speedup(str(tmp_path))["bf16_speedup"] == 0.5 and len(calls) == 2
    assert json.loads(path.read_text())["bf16_speedup"] == 0.5


@pytest.mark.serial  # measures the CPU's matmul speed: alone, or it measures the other test too
def test_a_real_probe_measures_both_dtypes():
    record = hardware.probe_bf16(seconds=0.02)
    assert record["fp32_gflops"] > 0 and record["bf16_gflops"] > 0
    assert abs(record["bf16_speedup"] - record["bf16_gflops"] / record["fp32_gflops"]) < 0.01
    assert record["cpu"] and record["threads"] == torch.get_num_threads()


def test_the_isa_probe_agrees_with_the_kernel_flags():
    with open("/proc/cpuinfo") as f:
        flags = set(next(line for line in f if line.startswith("flags")).split())
    isa = hardware.cpu_bf16_matmul_isa()
    assert (isa != "") == bool(flags & {"amx_bf16", "avx512_bf16"})


@pytest.mark.serial  # --dtype auto measures the CPU's matmul speed (a real probe): alone
def test_parse_args_resolves_auto_and_says_what_it_chose(tiny_model_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CREDO_CACHE_DIR", str(tmp_path))
    args = parse_args(["--model_name_or_path", tiny_model_dir])
    want = hardware.auto_dtype_name(torch.cuda.is_available())[0]
    assert args.dtype == want
    out = capsys.readouterr().out
    assert f"--dtype auto: {want}" in out and "measured" in out
    assert any(name.endswith(".json") for name in os.listdir(tmp_path))
