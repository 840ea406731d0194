"""Step metrics to the console (one line), OUTPUT_DIR/metrics.jsonl (one object per step) and TensorBoard."""
import json
import math
import os

# Shown on the console line, in this order, when present.
CONSOLE_KEYS = (("reward/mean", "reward"), ("success_rate", "success"), ("frac_zero_std_groups", "zero_std"),
                ("response_length/mean", "len"), ("actor/kl", "kl"), ("actor/entropy", "ent"),
                ("actor/clipfrac", "clip"), ("actor/grad_norm", "gnorm"), ("time/step", "s/step"))


class MetricsLogger:
    """Rank 0 writes; other ranks hold a disabled logger."""

    def __init__(self, output_dir: str, enabled: bool, tensorboard_path: str = None, start_step: int = 0):
        """start_step: the step a run starts after (0 for a fresh run, N when resumed from step N). Lines of
        later steps, left by a run that died after its last checkpoint, are dropped so no step appears twice."""
        self.enabled = enabled
        self.path = os.path.join(output_dir, "metrics.jsonl")
        self.tb = None
        if enabled:
            os.makedirs(output_dir, exist_ok=True)
            if os.path.exists(self.path):
                kept = [r for r in read_metrics(self.path) if r["step"] <= start_step]
                with open(self.path, "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in kept)
            if tensorboard_path:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(tensorboard_path)

    def log(self, step: int, metrics: dict):
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def console_line(self, step: int, metrics: dict) -> str:
        parts = [f"step {step}"]
        for key, label in CONSOLE_KEYS:
            if key in metrics:
                parts.append(f"{label} {_plain(metrics[key]):.4g}")
        return " | ".join(parts)

    def close(self):
        if self.tb is not None:
            self.tb.close()


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def read_metrics(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
