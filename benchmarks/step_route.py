"""The route of one step (issue #63 item 1): which of credo's files run during one default GRPO step.

    .venv/bin/python benchmarks/step_route.py [--output benchmarks/results/step_route.md]

Builds the trainer as train.py does (GRPO on arith, the CPU model, default flags but a small batch: 2 prompts x 2
responses of 8 tokens, no checkpoint), then records with sys.setprofile and threading.setprofile (the env steps run
in a thread pool) every file of this repository whose Python code runs from the start of `Trainer.train_step` to
the end of the step's logging (what `Trainer.fit` does between two steps: `Trainer.log_step`, the console line, the
stop check). Start-up (Trainer.__init__ and the start of `fit`) and the final save are not part of a step. The count
is what the issue's 22-file target reads; tests/test_step_route.py compares it with README's list.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)

FLAGS = ["--algo", "grpo", "--env", "arith", "--per_device_generation_batch_size", "2", "--num_generations", "2",
         "--max_answer_seq_len", "8", "--max_steps", "2", "--beta", "0", "--dtype", "fp32", "--save_strategy", "no"]


def traced(fn):
    """Run fn() and return ({repo-relative file: calls}, fn's result) for every Python frame of this repository."""
    seen = Counter()

    def profile(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(REPO) and "/.venv" not in path and path != os.path.abspath(__file__):  # not this tracer
                seen[os.path.relpath(path, REPO)] += 1

    threading.setprofile(profile)  # threads started from here on: the env steps' pool (rl/rollout/episodes.py)
    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return seen, result


def one_step_route(model: str = None) -> Counter:
    """{repo-relative file: calls} of one default step; `model` (default: --model_name_or_path's default, the CPU
    model) changes no file on the route (the tests pass a tiny one)."""
    from rl.config import parse_args
    from rl.trainer import Trainer
    out = tempfile.mkdtemp(prefix="step_route_")
    trainer = Trainer(parse_args([*FLAGS, "--output_dir", out, *(["--model_name_or_path", model] if model else [])]))

    def step_and_log():
        # Trainer.fit's body for one step, without its loop and saves (rl/trainer.py)
        metrics = trainer.train_step()
        trainer.step += 1
        trainer.log_step(metrics)
        trainer.metrics.console_line(trainer.step, metrics)
        trainer._stop_requested()

    files, _ = traced(step_and_log)
    trainer.metrics.close()
    trainer.scorer.close()
    return files


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output", default=None)
    p.add_argument("--model_name_or_path", default=None, help="default: train.py's (the route does not depend on it)")
    p.add_argument("--json", action="store_true", help="print only the traced files, as one JSON list")
    a = p.parse_args(argv)
    files = one_step_route(a.model_name_or_path)
    if a.json:
        print(json.dumps(sorted(files)))
        return
    folders = Counter(os.path.dirname(f) or "." for f in files)
    lines = [f"# The route of one default GRPO step (issue #63 item 1)", "",
             "`.venv/bin/python benchmarks/step_route.py --output benchmarks/results/step_route.md` (the module "
             "docstring says what is traced).", "",
             f"**{len(files)} files** in {len(folders)} folders ({', '.join(sorted(folders))}).", "",
             "| file | calls |", "|---|---|"]
    lines += [f"| {f} | {n} |" for f, n in sorted(files.items())]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
