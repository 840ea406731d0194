"""What one TCPO counterfactual alternative costs on AppWorld lite (envs/appworld/env.py score_turn_at), beside the
turn it stands in for.

    python -m benchmarks.bench_appworld_alternative [--repeats 10]

Times, in ms (median and max over --repeats): a played turn that runs a cell (env.step: its world host, sandbox and
judging), an alternative with a cell scored from the state saved before turn 1 (the same host, sandbox and judging
on a throw-away copy), an alternative without a code block (judging only: the saved state was judged when saved), and
saving a turn's state (what every played lite turn now pays). The cell is the task's reference solution.
"""
import argparse
import os
import statistics
import time

from benchmarks.results_io import cpu_model, write_results
from envs import make_env
from envs.appworld.lite.tasks import PRELUDE, load_task

TASK = "messages_text_relationship_1"


def summary(times: list) -> dict:
    return {"median_ms": statistics.median(times), "max_ms": max(times)}


def timed(fn, repeats: int) -> dict:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return summary(times)


def measure(repeats: int) -> dict:
    prelude, cell = f"```python\n{PRELUDE}\n```", f"```python\n{load_task(TASK).solution[1]}\n```"
    env = make_env("appworld", max_turns=3)
    steps = []
    for _ in range(repeats):  # turn 1 of a fresh episode whose turn 0 logged in; only turn 1 is timed
        env.reset({"id": TASK})
        env.step(prelude)
        t0 = time.perf_counter()
        env.step(cell)  # completes the task: the episode ends, its states before turns 0 and 1 kept
        steps.append((time.perf_counter() - t0) * 1000)
    result = {"played turn (step with a cell)": summary(steps),
              "alternative with a cell": timed(lambda: env.score_turn_at(1, cell), repeats),
              "alternative without code": timed(lambda: env.score_turn_at(1, "no code"), repeats)}
    env.reset({"id": TASK})
    result["saving a turn's state"] = timed(lambda: env.lite.save_state(TASK), repeats)
    env.close()
    return result


def report(result: dict) -> str:
    lines = [f"# One counterfactual alternative on AppWorld lite ({result['task']})", "",
             f"CPU: {result['cpu']}; load average {result['load']:.1f} on {result['cores']} cores; "
             f"{result['repeats']} repeats.", "", "| what | median ms | max ms |", "|---|---|---|"]
    ms = lambda x: f"{x:.1f}" if x >= 1 else f"{x:.3f}"  # noqa: E731
    lines += [f"| {k} | {ms(v['median_ms'])} | {ms(v['max_ms'])} |" for k, v in result["times"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--results", default=os.path.join(os.path.dirname(__file__), "results", "appworld_alternative"))
    args = p.parse_args(argv)
    times = measure(args.repeats)
    write_results({"task": TASK, "cpu": cpu_model(), "cores": os.cpu_count(), "load": os.getloadavg()[0],
                   "repeats": args.repeats, "times": times}, args.results, report)


if __name__ == "__main__":
    main()
