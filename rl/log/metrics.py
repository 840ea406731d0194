"""Step metrics to the console (one line) and the --report_to loggers (rl/log/loggers.py: OUTPUT_DIR/metrics.jsonl, one
object per step, by default; TensorBoard; W&B); a few completions per step to OUTPUT_DIR/completions.jsonl (and
TensorBoard text, a W&B table).

Both JSONL files are strict JSON: a value that is not finite (a NaN mean over no responses, an infinite norm) is
written as null, never as the bare NaN / Infinity that json.dumps emits by default and most parsers reject.
"""
import os

from rl.log.loggers import build_loggers


# Shown on the console line, in this order, when present.
CONSOLE_KEYS = (("reward/mean", "reward"), ("success_rate", "success"), ("frac_zero_std_groups", "zero_std"),
                ("response_length/mean", "len"), ("response_length/truncated_frac", "trunc"), ("avg_turns", "turns"),
                ("regression_rate", "regress"),
                ("conductor/entropy", "conductor_H"), ("actor/kl", "kl"), ("actor/entropy", "ent"),
                ("actor/clipfrac", "clip"), ("actor/grad_norm", "gnorm"), ("time/step", "s/step"))
# Method metrics with one entry per reward, shown on the console as label_<reward>.
CONSOLE_PREFIXES = (("dara/w/", "w"),)


class MetricsLogger:
    """Rank 0 writes, to the --report_to loggers (rl/log/loggers.py); other ranks hold a disabled logger."""

    def __init__(self, output_dir: str, enabled: bool, tensorboard_path: str = None, start_step: int = 0,
                 report_to: tuple = None, wandb=None):
        """start_step: the step a run starts after (0 for a fresh run, N when resumed from step N); the JSONL logger
        drops lines of later steps, left by a run that died after its last checkpoint, so no step appears twice.
        report_to: logger names (rl.log.loggers.report_backends); None: jsonl, and tensorboard when tensorboard_path is
        given. wandb: rl.log.loggers.WandbSettings for the wandb logger."""
        self.enabled = enabled
        self.path = os.path.join(output_dir, "metrics.jsonl")
        self.completions_path = os.path.join(output_dir, "completions.jsonl")
        if report_to is None:
            report_to = ("jsonl", "tensorboard") if tensorboard_path else ("jsonl",)
        self.loggers = []
        if enabled:
            os.makedirs(output_dir, exist_ok=True)
            self.loggers = build_loggers(report_to, output_dir, start_step, tensorboard_path, wandb)

    def log(self, step: int, metrics: dict):
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        for logger in self.loggers:
            logger.log(step, record)

    def log_completions(self, step: int, records: list):
        """One line per completion record (rl/log/step_metrics.py), each with its step."""
        if not self.enabled or not records:
            return
        for logger in self.loggers:
            logger.log_completions(step, records)

    def console_line(self, step: int, metrics: dict) -> str:
        parts = [f"step {step}"]
        for key, label in CONSOLE_KEYS:
            if key == "response_length/mean" and "avg_turns" in metrics:
                label = "len(all turns)"  # a multi-turn response is every model turn of the episode
            value = _plain(metrics.get(key))
            if isinstance(value, float):
                parts.append(f"{label} {value:.4g}")
        for prefix, label in CONSOLE_PREFIXES:
            parts += [f"{label}_{k[len(prefix):]} {_plain(v):.3g}" for k, v in metrics.items() if k.startswith(prefix)]
        parts += reward_failures(metrics)
        return " | ".join(parts)

    def close(self):
        for logger in self.loggers:
            logger.close()


def reward_failures(metrics: dict) -> list:
    """The step's reward calls retried after a failure outside the response, and those scored 0 by a failure, over
    every reward (rl/scoring.py's reward/<name>/...): shown only when there are any, so that a dying reward worker or
    a flaky judge is seen on the console, not only in metrics.jsonl."""
    def total(suffix):
        return sum(_plain(v) or 0 for k, v in metrics.items() if k.startswith("reward/") and k.endswith(suffix))
    retried, recovered, failed = total("/retried"), total("/recovered"), total("/errors")
    parts = [f"reward_retried {retried:g} (recovered {recovered:g})"] if retried else []
    return parts + ([f"reward_failed {failed:g}"] if failed else [])


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
