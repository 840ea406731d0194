"""Writing a testbed's result (JSON + markdown) with the machine it ran on, and the command line every testbed shares."""
import argparse
import os
import platform

import torch

from benchmarks.results_io import write_results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def environment() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
            "python": platform.python_version(), "torch": torch.__version__}


def write(result: dict, prefix: str, report) -> str:
    """benchmarks/results_io.write_results: PREFIX.json, PREFIX.md, and the report printed."""
    return write_results(result, prefix, report)


def testbed_main(doc: str, name: str, run, report, seeds: int, min_seeds: int = 1):
    """`python -m experiments.mechanisms.<name> [--seeds N] [--results PREFIX]`: run(range(N)) on one thread (tiny
    tensors: more threads only add overhead), then PREFIX.json and PREFIX.md, by default
    experiments/results/mechanisms_<name>."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=seeds, help=f"paired seeds 0..N-1 (default {seeds})")
    p.add_argument("--results", default=os.path.join(REPO, "experiments", "results", f"mechanisms_{name}"),
                   help=f"output prefix for .json and .md (default experiments/results/mechanisms_{name})")
    a = p.parse_args()
    if a.seeds < min_seeds:
        p.error(f"--seeds must be at least {min_seeds}" + (" (standard errors)" if min_seeds > 1 else "") +
                f", got {a.seeds}")
    torch.set_num_threads(1)
    return write(run(range(a.seeds)), a.results, report)
