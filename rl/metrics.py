"""Step metrics to the console (one line), OUTPUT_DIR/metrics.jsonl (one object per step) and TensorBoard; a few
completions per step to OUTPUT_DIR/completions.jsonl (and TensorBoard text).

Both JSONL files are strict JSON: a value that is not finite (a NaN mean over no responses, an infinite norm) is
written as null, never as the bare NaN / Infinity that json.dumps emits by default and most parsers reject.
"""
import json
import math
import os

from rl.completions import markdown_table

# Shown on the console line, in this order, when present.
CONSOLE_KEYS = (("reward/mean", "reward"), ("success_rate", "success"), ("frac_zero_std_groups", "zero_std"),
                ("response_length/mean", "len"), ("avg_turns", "turns"), ("regression_rate", "regress"),
                ("conductor/entropy", "conductor_H"), ("actor/kl", "kl"), ("actor/entropy", "ent"),
                ("actor/clipfrac", "clip"), ("actor/grad_norm", "gnorm"), ("time/step", "s/step"))
# Method metrics with one entry per reward, shown on the console as label_<reward>.
CONSOLE_PREFIXES = (("dara/w/", "w"),)


class MetricsLogger:
    """Rank 0 writes; other ranks hold a disabled logger."""

    def __init__(self, output_dir: str, enabled: bool, tensorboard_path: str = None, start_step: int = 0):
        """start_step: the step a run starts after (0 for a fresh run, N when resumed from step N). Lines of
        later steps, left by a run that died after its last checkpoint, are dropped so no step appears twice."""
        self.enabled = enabled
        self.path = os.path.join(output_dir, "metrics.jsonl")
        self.completions_path = os.path.join(output_dir, "completions.jsonl")
        self.tb = None
        if enabled:
            os.makedirs(output_dir, exist_ok=True)
            for path in (self.path, self.completions_path):
                if os.path.exists(path):
                    kept = [r for r in read_metrics(path) if r["step"] <= start_step]
                    with open(path, "w") as f:
                        f.writelines(to_json_line(r) for r in kept)
            if tensorboard_path:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(tensorboard_path)

    def log(self, step: int, metrics: dict):
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        with open(self.path, "a") as f:
            f.write(to_json_line(record))
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def log_completions(self, step: int, records: list):
        """One line per completion record (rl/completions.py), each with its step."""
        if not self.enabled or not records:
            return
        with open(self.completions_path, "a") as f:
            f.writelines(to_json_line({"step": step, **r}) for r in records)
        if self.tb is not None:
            self.tb.add_text("completions", markdown_table(records), step)
            self.tb.flush()

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
        return " | ".join(parts)

    def close(self):
        if self.tb is not None:
            self.tb.close()


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _finite_or_null(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite_or_null(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite_or_null(x) for x in v]
    return v


def to_json_line(record: dict) -> str:
    """One strict-JSON line: non-finite numbers become null (allow_nan=False makes any that slipped through an
    error here rather than a file other tools cannot read)."""
    return json.dumps(_finite_or_null(record), allow_nan=False) + "\n"


def read_metrics(path: str) -> list:
    """The records of a metrics.jsonl (or completions.jsonl); a null is a value that was not finite."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
