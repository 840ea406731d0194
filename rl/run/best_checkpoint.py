"""Keep the best validated model (--save_best_metric, OpenRLHF's best_metric_key): OUTPUT_DIR/best is the HF export
of the step whose validation scored best on that metric so far, with best_metric.json beside its weights.

A kill can never leave `best` half written or pointing at nothing: each new best is exported to its own folder
`best_step_N` (rl.run.checkpoint.export_hf: written to a temporary sibling, then renamed), its best_metric.json is
written and fsynced, and only then does the symlink `best` move to it, in one os.replace (atomic on POSIX). The
folder it pointed at before is removed afterwards; a kill in between leaves a stale folder, removed next time.
"""
import json
import math
import os
import re
import shutil

from rl.engine import dist
from rl.run.manifest import fsync_dir

BEST_LINK = "best"
RECORD = "best_metric.json"
# the eval/ metrics where a smaller value is the better model; every other one is better when larger
LOWER_IS_BETTER = ("eval/avg_turns_to_success", "eval/regression_rate")


def check_metric_name(name: str, ks: list, n: int, max_turns: int):
    """None when `name` is a metric the validation logs (rl.eval.evaluation.aggregate's names under eval/), else why not.
    The graded scores (mean_final_score, mean_best_score) exist only for envs that grade; checked again at the first
    validation."""
    if not name.startswith("eval/"):
        return "the metric must be one the validation logs, named as in metrics.jsonl: eval/<eval.py's name>, " \
               "e.g. eval/pass@1"
    known = {f"{kind}@{k}" for k in ks for kind in ("pass", "best_turn_pass")} | {f"mean@{n}", "success_rate",
                                                                                 "avg_turns_to_success",
                                                                                 "mean_final_score", "mean_best_score"}
    known |= {f"success_by_turn/{t}" for t in range(1, max_turns + 1)}
    if max_turns > 1:
        known |= {f"final_turn_pass@{k}" for k in ks} | {"preservation_rate", "regression_rate"}
    if name[len("eval/"):] not in known:
        return f"not logged by this run's validation (--eval_n {n}, --max_turns {max_turns}); it logs " + \
               ", ".join(f"eval/{k}" for k in sorted(known))
    return None


def is_better(name: str, value: float, best) -> bool:
    """Whether `value` beats `best` (None: nothing yet). A NaN (no sample succeeded, for avg_turns_to_success) never
    wins; a tie keeps the earlier step. Pure function."""
    if value is None or not math.isfinite(value):
        return False
    if best is None:
        return True
    return value < best if name in LOWER_IS_BETTER else value > best


def read_best(output_dir: str):
    """The record ({"metric", "value", "step"}) of OUTPUT_DIR/best, or None when there is none."""
    path = os.path.join(output_dir, BEST_LINK, RECORD)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


class BestCheckpoint:
    """After each validation, exports the actor to OUTPUT_DIR/best when the --save_best_metric value beats the best
    so far. Collective (the export gathers ZeRO-3 partitions): every rank calls `consider` with the same metrics."""

    def __init__(self, metric: str, output_dir: str, resumed: bool):
        self.metric, self.output_dir = metric, output_dir
        previous = read_best(output_dir) if metric and resumed else None
        # a resumed run continues the race it was in; a fresh one (even in a used folder) starts a new one
        same = previous is not None and previous.get("metric") == metric
        self.best, self.best_step = (previous["value"], previous["step"]) if same else (None, None)

    def consider(self, step: int, metrics: dict, actor, tokenizer) -> dict:
        """The best-so-far metrics to log (best/<metric>, best/step), after saving a new best; {} when off or when
        this step has no validation (its metrics have no eval/ key)."""
        if not self.metric or not any(k.startswith("eval/") for k in metrics):
            return {}
        if self.metric not in metrics:
            raise SystemExit(f"train.py: error: --save_best_metric {self.metric}: the validation logged no such "
                             f"metric; it logged {', '.join(sorted(k for k in metrics if k.startswith('eval/')))}")
        value = metrics[self.metric]
        if is_better(self.metric, value, self.best):
            self.save(step, value, actor, tokenizer)
            self.best, self.best_step = value, step
        return {} if self.best is None else {f"best/{self.metric}": self.best, "best/step": float(self.best_step)}

    def save(self, step: int, value: float, actor, tokenizer):
        from rl.run.checkpoint import export_hf
        folder = os.path.join(self.output_dir, f"best_step_{step}")
        export_hf(actor, tokenizer, folder)  # collective; atomic (temporary sibling, then rename)
        if dist.rank() == 0:
            _write_json(os.path.join(folder, RECORD), {"metric": self.metric, "value": value, "step": step})
            point_best_at(self.output_dir, os.path.basename(folder))
        dist.barrier()


def point_best_at(output_dir: str, folder_name: str):
    """Move the `best` symlink to OUTPUT_DIR/folder_name in one rename, then remove the best_step_* folders it no
    longer points at (the one it pointed at before, and any left by a kill)."""
    link = os.path.join(output_dir, BEST_LINK)
    tmp = link + ".tmp-link"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(folder_name, tmp)  # relative: the output folder may be moved or copied
    os.replace(tmp, link)
    fsync_dir(output_dir)
    for name in os.listdir(output_dir):
        if re.fullmatch(r"best_step_\d+(\.tmp)?", name) and name != folder_name:
            shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)


def _write_json(path: str, record: dict):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
