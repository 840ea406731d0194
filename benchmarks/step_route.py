"""The route of one step (issue #63 item 1): which of credo's files run during one default GRPO step.

    .venv/bin/python benchmarks/step_route.py [--output benchmarks/results/step_route.md]

Builds the trainer as train.py does (GRPO on arith, the CPU model, default flags but a small batch: 2 prompts x 2
responses of 8 tokens, no checkpoint), then records with sys.setprofile every file of this repository whose Python
code runs from the start of `Trainer.train_step` to the end of the step's logging (what `Trainer.fit` does between
two steps: validation and best-checkpoint hooks, metrics, completions, console line, the stop check). Start-up
(Trainer.__init__) and the final save are not part of a step. The count is what the issue's 22-file target reads.
"""
import argparse
import os
import sys
import tempfile
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

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return seen, result


def one_step_route() -> Counter:
    from rl.config import parse_args
    from rl.trainer import Trainer
    out = tempfile.mkdtemp(prefix="step_route_")
    trainer = Trainer(parse_args([*FLAGS, "--output_dir", out]))

    def step_and_log():
        # Trainer.fit's body for one step, without its loop and saves (rl/trainer.py)
        from rl.eval.validation import PeriodicValidation
        from rl.run.best_checkpoint import BestCheckpoint
        validation = PeriodicValidation.from_args(trainer.args, trainer.actor, trainer.tokenizer, trainer.steps)
        best = BestCheckpoint(trainer.args.save_best_metric, trainer.output.output_dir, resumed=False)
        metrics = trainer.train_step()
        trainer.step += 1
        metrics.update(validation.after_step(trainer.step))
        metrics.update(best.consider(trainer.step, metrics, trainer.actor, trainer.tokenizer))
        trainer.metrics.log(trainer.step, metrics)
        trainer.metrics.log_completions(trainer.step, trainer.completion_samples)
        trainer.metrics.console_line(trainer.step, metrics)
        trainer._stop_requested()

    files, _ = traced(step_and_log)
    trainer.metrics.close()
    trainer.scorer.close()
    return files


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output", default=None)
    a = p.parse_args(argv)
    files = one_step_route()
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
