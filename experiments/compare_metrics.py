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


def _first_existing(run_dir: str, *candidates: str) -> str:
    """The first of the candidate files that exists under run_dir (the first when none does)."""
    paths = [os.path.join(run_dir, c) for c in candidates]
    return next((p for p in paths if os.path.exists(p)), paths[0])


def metric_value(metric: Metric, run_dir: str, max_steps: int):
    """(value, censored) of one finished run: compare.py's cached run (train/, eval/) or a train.py output folder
    (metrics.jsonl; eval.py's results in eval/, or scripts/train.sh's eval_final/)."""
    if metric.kind == "eval":
        path = _first_existing(run_dir, os.path.join("eval", "results.json"), os.path.join("eval_final", "results.json"))
        if not os.path.exists(path):
            raise CompareError(f"--metric {metric.spec}: {run_dir} has no eval results; evaluate it first: python "
                               f"eval.py --model_name_or_path {os.path.join(run_dir, 'final')} --output_dir "
                               f"{os.path.join(run_dir, 'eval')}")
        with open(path) as f:
            metrics = json.load(f)["metrics"]
        if metric.key not in metrics:
            raise CompareError(f"--metric {metric.spec}: {metric.key!r} is not in {path} "
                               f"(it has {', '.join(sorted(metrics))})")
        return float(metrics[metric.key]), False
    from rl.log.loggers import read_metrics
    path = _first_existing(run_dir, os.path.join("train", "metrics.jsonl"), "metrics.jsonl")
    rows = read_metrics(path)
    if not rows or metric.key not in rows[-1]:
        raise CompareError(f"--metric {metric.spec}: {metric.key!r} is not logged in {path}")
    values = [float(r[metric.key]) for r in rows]
    if metric.kind == "last":
        return values[-1], False
    if metric.kind == "mean_last":
        tail = values[-metric.window:]
        return sum(tail) / len(tail), False
    step = first_sustained_step([r["step"] for r in rows], values, metric.threshold, metric.window)
    return (float(max_steps + 1), True) if step is None else (float(step), False)
