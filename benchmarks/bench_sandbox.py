"""Verification throughput: HumanEval canonical solutions through the sandbox vs a bare `subprocess.run`.

Both run the same 164 programs (solution + tests) with the same number of parallel workers, alternating in rounds
so machine noise hits both; the result is a ratio.

    .venv/bin/python benchmarks/bench_sandbox.py --workers 2 --rounds 2
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from rewards.code import run_tests  # noqa: E402


def bare(program: str, test: str) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program + "\n" + test)
    try:
        return subprocess.run([sys.executable, f.name], capture_output=True, timeout=30).returncode == 0
    finally:
        os.remove(f.name)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "sandbox_throughput.json"))
    a = p.parse_args()
    with open(os.path.join(REPO, "data", "humaneval", "test.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    jobs = [(r["prompt"] + r["canonical_solution"], r["test"] + f"\ncheck({r['entry_point']})") for r in rows]
    times = {"sandbox": [], "bare": []}
    for _ in range(a.rounds):
        for name, fn in (("bare", lambda j: bare(*j)), ("sandbox", lambda j: run_tests(j[0], [j[1]], timeout_s=30).score == 1.0)):
            t0 = time.perf_counter()
            with ThreadPoolExecutor(a.workers) as pool:
                ok = list(pool.map(fn, jobs))
            times[name].append(time.perf_counter() - t0)
            assert all(ok), f"{name}: {ok.count(False)} canonical solutions failed"
    best = {k: min(v) for k, v in times.items()}
    result = {"programs": len(jobs), "workers": a.workers, "rounds": a.rounds, "seconds": times,
              "programs_per_s": {k: len(jobs) / v for k, v in best.items()},
              "overhead_ratio": best["sandbox"] / best["bare"], "cpu_count": os.cpu_count(),
              "command": "python benchmarks/bench_sandbox.py --workers %d --rounds %d" % (a.workers, a.rounds)}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
