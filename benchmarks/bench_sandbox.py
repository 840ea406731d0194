"""Verification throughput: HumanEval canonical solutions through the sandbox vs a bare `subprocess.run`.

Both run the same 164 programs (solution + tests) with the same number of parallel workers, alternating in rounds
so machine noise hits both; the result is a ratio. The sandbox side is the real one: bubblewrap, a cgroup per run,
and the tests in a second sandbox talking to the program over a pipe (two sandboxed interpreters per program).
Records the CPU model, the load average around each timed pass, and the isolation every run got.

    .venv/bin/python benchmarks/bench_sandbox.py --workers 2 --rounds 2
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.results_io import write_results
from rewards.code import run_tests, sandbox_counts
from rewards.sandbox.bwrap import find_bwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bare(program: str, test: str) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program + "\n" + test)
    try:
        return subprocess.run([sys.executable, f.name], capture_output=True, timeout=30).returncode == 0
    finally:
        os.remove(f.name)


def machine() -> dict:
    info = {"cpu": platform.processor(), "cpu_count": os.cpu_count(), "python": platform.python_version()}
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            info["cpu"] = line.split(":", 1)[1].strip()
    bwrap = find_bwrap()
    info["bwrap"] = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() if bwrap \
        else None
    return info


def report(r: dict) -> str:
    pps, load = r["programs_per_s"], r["loadavg_1min"]
    return (f"# Sandbox throughput\n\n`{r['command']}` on {r['machine']['cpu']} ({r['machine']['cpu_count']} cores, "
            f"{r['machine']['bwrap']}); isolation of every sandboxed run: {r['isolation']}.\n\n"
            f"| | programs/s (best round) | seconds per round |\n|---|---|---|\n"
            f"| bare `subprocess.run` | {pps['bare']:.1f} | {', '.join(f'{s:.1f}' for s in r['seconds']['bare'])} |\n"
            f"| sandbox (`run_tests`) | {pps['sandbox']:.1f} | "
            f"{', '.join(f'{s:.1f}' for s in r['seconds']['sandbox'])} |\n\n"
            f"Sandbox / bare: {r['overhead_ratio']:.2f}x per program. 1-minute load average during the passes: "
            f"{min(load):.1f} to {max(load):.1f} (the machine is shared; the rounds alternate so load hits both).\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="parallel programs (default 2, as --code_workers)")
    p.add_argument("--rounds", type=int, default=2, help="timed passes per side (default 2)")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "sandbox_throughput"),
                   help="results path without extension (default benchmarks/results/sandbox_throughput)")
    a = p.parse_args()
    with open(os.path.join(REPO, "data", "humaneval", "test.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    jobs = [(r["prompt"] + r["canonical_solution"], r["test"] + f"\ncheck({r['entry_point']})") for r in rows]
    times, load = {"sandbox": [], "bare": []}, []
    sides = (("bare", lambda j: bare(*j)), ("sandbox", lambda j: run_tests(j[0], [j[1]], timeout_s=30).score == 1.0))
    for _ in range(a.rounds):
        for name, fn in sides:
            load.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            with ThreadPoolExecutor(a.workers) as pool:
                ok = list(pool.map(fn, jobs))
            times[name].append(time.perf_counter() - t0)
            load.append(os.getloadavg()[0])
            assert all(ok), f"{name}: {ok.count(False)} canonical solutions failed"
    best = {k: min(v) for k, v in times.items()}
    result = {"programs": len(jobs), "workers": a.workers, "rounds": a.rounds, "seconds": times,
              "programs_per_s": {k: len(jobs) / v for k, v in best.items()},
              "overhead_ratio": best["sandbox"] / best["bare"], "machine": machine(), "loadavg_1min": load,
              "isolation": sandbox_counts(),
              "command": "python benchmarks/bench_sandbox.py --workers %d --rounds %d" % (a.workers, a.rounds)}
    write_results(result, a.out, report)


if __name__ == "__main__":
    main()
