"""Writing a testbed's result (JSON + markdown) with the machine it ran on."""
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
