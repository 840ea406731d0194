"""compare.py's arms, run by run: a run it makes (train.py under the deepspeed launcher, then eval.py; cached and
resumable: `execute_run`), or a train.py output folder that already exists (`--runs LABEL=DIR[,DIR...]`: read, never
run or changed). A folder arm's seed is its config.json's --seed, so its runs pair with the other arms' by seed; its
metrics are its own metrics.jsonl and, for eval: metrics, the results.json of an eval.py run into DIR/eval (or
scripts/train.sh's DIR/eval_final)."""
import json
import os
import shutil
import sys
import time

from benchmarks import run_child
from benchmarks.archive_pack import unpacked
from benchmarks.ports import free_port
from experiments.compare_metrics import CompareError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _call(cmd, log_path: str, what: str, append: bool = False):
    code = run_child.call(cmd, REPO, log_path, what, append=append)  # a SIGTERM stops the run cleanly: run_child.py
    if code != 0:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise CompareError(f"{what} failed (exit {code}); log: {log_path}\n{tail}")


def interrupted_state(run_dir: str, max_steps: int):
    """What an earlier, interrupted attempt at this run left: None (nothing usable: start over), "trained" (its
    final export exists, so only eval.py is left) or the step of its latest complete checkpoint before max_steps
    (one at max_steps without the export, a kill during the export, is not resumable: train.py would find the run
    finished and not export it)."""
    from rl.run.checkpoint import latest_checkpoint
    train_dir = os.path.join(run_dir, "train")
    if os.path.isdir(os.path.join(train_dir, "final")):  # export_hf renames a finished folder into place
        return "trained"
    tag = latest_checkpoint(os.path.join(train_dir, "checkpoints")) if os.path.isdir(train_dir) else None
    step = int(tag.split("_")[-1]) if tag else None
    return step if step is not None and step < max_steps else None


def execute_run(run_dir: str, train_argv, eval_argv, num_gpus: int, record: dict, keep_checkpoints: bool = False,
                restart_interrupted: bool = False):
    """train.py under the real deepspeed launcher, then eval.py; run.json last, atomically. An interrupted run
    continues from its latest checkpoint (module docstring). A finished run never resumes, so its checkpoints are
    removed unless keep_checkpoints: they are several model sizes each, and ten 135M runs' filled a disk (the final
    export stays)."""
    resumable = not restart_interrupted and os.path.exists(run_dir)
    earlier = interrupted_state(run_dir, record["config"]["max_steps"]) if resumable else None
    if earlier is None:
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
    else:
        record["resumed_from"] = earlier  # a checkpoint's step, or "trained"
        print(f"compare: continuing {run_dir} from " + ("its finished training (eval only)" if earlier == "trained"
              else f"its checkpoint at step {earlier}"), flush=True)
    if earlier != "trained":
        launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
        assert train_argv[-2:] == ["--resume", "none"], train_argv  # as sweep() plans every run
        argv = [*train_argv[:-1], "auto"] if earlier is not None else train_argv
        t0 = time.time()
        _call([launcher, "--num_gpus", str(num_gpus), "--master_port", str(free_port()), "train.py", *argv,
               "--output_dir", os.path.join(run_dir, "train")], os.path.join(run_dir, "train.log"),
              f"train.py ({run_dir})", append=earlier is not None)
        record["train_seconds"] = time.time() - t0  # of this attempt only, when resumed
    if eval_argv is not None:
        t0 = time.time()
        _call([sys.executable, "eval.py", "--model_name_or_path", os.path.join(run_dir, "train", "final"),
               "--output_dir", os.path.join(run_dir, "eval"), *eval_argv], os.path.join(run_dir, "eval.log"),
              f"eval.py ({run_dir})")
        record["eval_seconds"] = time.time() - t0
    if not keep_checkpoints:
        shutil.rmtree(os.path.join(run_dir, "train", "checkpoints"), ignore_errors=True)
    tmp = os.path.join(run_dir, "run.json.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, default=str)
    os.replace(tmp, os.path.join(run_dir, "run.json"))



def parse_runs(spec: str):
    """(label, {seed: (folder, its config.json)}) of a --runs LABEL=DIR[,DIR...] arm; CompareError naming a folder that
    is no train.py run, or two folders of one seed."""
    label, sep, dirs = spec.partition("=")
    if not sep or not label or not dirs.strip():
        raise CompareError(f"--runs {spec!r}: expected LABEL=DIR[,DIR...], train.py output folders (one per seed)")
    runs = {}
    for folder in (d.strip() for d in dirs.split(",") if d.strip()):
        path = os.path.join(unpacked(folder), "config.json")  # a folder inside a committed archive: unpacked first
        try:
            with open(path) as f:
                config = json.load(f)
            seed = int(config["flags"]["seed"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CompareError(f"--runs {label}: {folder} is not a train.py output folder (no readable config.json "
                               f"with its flags: {exc})") from None
        if not os.path.exists(os.path.join(folder, "metrics.jsonl")):
            raise CompareError(f"--runs {label}: {folder} has no metrics.jsonl (a run that trained no step, or one "
                               f"with --report_to without jsonl)")
        if seed in runs:
            raise CompareError(f"--runs {label}: {runs[seed][0]} and {folder} are both seed {seed}; an arm holds one "
                               f"run per seed")
        runs[seed] = (os.path.abspath(folder), config)
    return label, runs


def folder_record(folder: str, config: dict) -> dict:
    """What the report records of an existing run (it ran before this invocation, at its own commit)."""
    return {"key": None, "run_dir": folder, "ran_this_invocation": False,
            "commit": config.get("git_commit") or "unknown", "resumed_from": None, "train_seconds": None,
            "eval_seconds": None}
