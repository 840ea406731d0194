"""Print what a run learned: success rate of its first and last 10 steps and the before/after greedy accuracy.

    python scripts/summarize_run.py OUTPUT_DIR
"""
import json
import os
import sys

from rl.log.loggers import read_metrics


def main(output_dir: str):
    rows = read_metrics(os.path.join(output_dir, "metrics.jsonl"))
    first, last = rows[:10], rows[-10:]
    mean = lambda rs: 100.0 * sum(r["success_rate"] for r in rs) / len(rs)  # noqa: E731
    seconds = sum(r["time/step"] for r in rows)
    print(f"steps: {len(rows)} ({seconds / len(rows):.1f} s per step)")
    wall = os.path.join(output_dir, "train_wall.json")
    if os.path.exists(wall):  # scripts/train.sh's record: launcher start to exit (start-up, steps, save, export)
        with open(wall) as f:
            print(f"training wall time: {json.load(f)['train_wall_seconds'] / 60:.1f} min")
    print(f"success rate (sampled), first {len(first)} steps: {mean(first):.1f}%")
    print(f"success rate (sampled), last {len(last)} steps: {mean(last):.1f}%")
    for label, name in (("initial accuracy", "eval_initial"), ("final accuracy", "eval_final")):
        path = os.path.join(output_dir, name, "results.json")
        if os.path.exists(path):
            with open(path) as f:
                print(f"{label}: {100 * json.load(f)['metrics']['pass@1']:.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
