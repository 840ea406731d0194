"""compare.py's metrics: parsing a --metric spec and reading its value from one finished run."""
import json
import os
from dataclasses import dataclass


class CompareError(ValueError):
    pass


@dataclass(frozen=True)
class Metric:
    spec: str
    kind: str
    key: str
    threshold: float = None
    window: int = 1
    lower: bool = False  # a ":lower" suffix: e.g. eval:regression_rate:lower

    @property
    def higher_is_better(self) -> bool:
        return self.kind != "first_step" and not self.lower

    def describe(self) -> str:
        better = f"({'higher' if self.higher_is_better else 'lower'} is better)"
        if self.kind == "eval":
            return f"eval.py metrics[{self.key!r}] of the exported model {better}"
        if self.kind == "mean_last":
            return f"mean of {self.key!r} over the last {self.window} logged steps {better}"
        if self.kind == "last":
            return f"{self.key!r} at the last logged step {better}"
        return (f"first step at which the trailing {self.window}-step mean of {self.key!r} reaches {self.threshold} "
                f"and stays there to the end; max_steps + 1 if never (lower is better)")


def parse_metric(spec: str) -> Metric:
    parts = spec.split(":")
    lower = parts[-1] == "lower" and parts[0] != "first_step"
    parts = parts[:-1] if lower else parts
    kind, n = parts[0], len(parts)
    try:
        if kind in ("eval", "last") and n == 2:
            return Metric(spec, kind, parts[1], lower=lower)
        if kind == "mean_last" and n == 3:
            return Metric(spec, kind, parts[1], window=int(parts[2]), lower=lower)
        if kind == "first_step" and n == 4:
            return Metric(spec, kind, parts[1], threshold=float(parts[2]), window=int(parts[3]))
    except ValueError:
        pass
    raise CompareError(f"--metric {spec!r}: expected eval:KEY, last:KEY, mean_last:KEY:N or "
                       f"first_step:KEY:THRESHOLD:WINDOW (the first three take a ':lower' suffix)")


def first_sustained_step(steps, values, threshold: float, window: int):
    """(step, censored): the first step from which the trailing-window mean stays >= threshold to the end."""
    means = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
             for i in range(len(values))]
    answer = None
    for step, m in zip(steps, means):
        if m >= threshold:
            answer = step if answer is None else answer
        else:
            answer = None
    return answer


def metric_value(metric: Metric, run_dir: str, max_steps: int):
    """(value, censored) of one finished run."""
    if metric.kind == "eval":
        with open(os.path.join(run_dir, "eval", "results.json")) as f:
            metrics = json.load(f)["metrics"]
        if metric.key not in metrics:
            raise CompareError(f"--metric {metric.spec}: {metric.key!r} is not in {run_dir}/eval/results.json "
                               f"(it has {', '.join(sorted(metrics))})")
        return float(metrics[metric.key]), False
    from rl.log.loggers import read_metrics
    rows = read_metrics(os.path.join(run_dir, "train", "metrics.jsonl"))
    if not rows or metric.key not in rows[-1]:
        raise CompareError(f"--metric {metric.spec}: {metric.key!r} is not logged in {run_dir}/train/metrics.jsonl")
    values = [float(r[metric.key]) for r in rows]
    if metric.kind == "last":
        return values[-1], False
    if metric.kind == "mean_last":
        tail = values[-metric.window:]
        return sum(tail) / len(tail), False
    step = first_sustained_step([r["step"] for r in rows], values, metric.threshold, metric.window)
    return (float(max_steps + 1), True) if step is None else (float(step), False)
