"""--report_to (rl/log/loggers.py): which loggers a flag combination gives, refusals at parse time, and real train.py runs:
TensorBoard alone (no metrics.jsonl), none, and wandb offline on two ranks where only rank 0 writes a run."""
import glob
import os
import sys

import pytest

from rl.config import parse_args
from rl.log.loggers import WANDB_ID_FILE, report_backends
from rl.log.loggers import read_metrics
from tests.helpers import run_train, run_train_in_process

RUN = ["--env", "tests.fixture_envs:DigitFractionEnv", "--num_generations", "2", "--per_device_generation_batch_size",
       "1", "--max_answer_seq_len", "6", "--num_train_samples", "50", "--max_steps", "2", "--no_final_export"]


def assert_ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("report_to, tensorboard, expected", [
    ("jsonl", False, ("jsonl",)),                       # the default: what credo wrote before --report_to
    ("jsonl", True, ("jsonl", "tensorboard")),          # DeepSpeed-Chat's --enable_tensorboard adds TensorBoard
    ("wandb, tensorboard", False, ("tensorboard", "wandb")),
    ("tensorboard,tensorboard", True, ("tensorboard",)),
    ("none", False, ()),
])
def test_report_to_names_the_loggers(report_to, tensorboard, expected):
    assert report_backends(report_to, tensorboard) == expected


@pytest.mark.parametrize("report_to, tensorboard, message", [
    ("mlflow", False, "unknown logger mlflow"), (",", False, "unknown logger \\(empty\\)"),
    ("none,jsonl", False, "none cannot be combined"), ("none", True, "--enable_tensorboard"),
])
def test_bad_report_to_values_are_refused_naming_the_flag(report_to, tensorboard, message):
    with pytest.raises(ValueError, match=f"--report_to.*{message}"):
        report_backends(report_to, tensorboard)


def test_the_default_is_jsonl_and_tensorboard_and_a_bad_value_stops_train_py_at_parse_time(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir])  # the README's table promises both (#65 item 8)
    assert report_backends(args.report_to, args.enable_tensorboard) == ("jsonl", "tensorboard")
    with pytest.raises(SystemExit, match="--report_to 'mlflow'"):
        parse_args(["--model_name_or_path", tiny_model_dir, "--report_to", "mlflow"])


def test_tensorboard_path_is_accepted_with_report_to_tensorboard_and_refused_without_tensorboard(tiny_model_dir, tmp_path):
    tb = str(tmp_path / "tb")
    assert parse_args(["--model_name_or_path", tiny_model_dir, "--report_to", "tensorboard",
                       "--tensorboard_path", tb]).tensorboard_path == tb
    with pytest.raises(SystemExit, match="--tensorboard_path is set but TensorBoard is off"):
        parse_args(["--model_name_or_path", tiny_model_dir, "--report_to", "jsonl", "--tensorboard_path", tb])


def test_report_to_wandb_without_the_package_is_refused_with_the_install_hint(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError, as where it is absent
    with pytest.raises(SystemExit, match="wandb package is not installed; pip install -r requirements-wandb.txt"):
        parse_args(["--model_name_or_path", tiny_model_dir, "--report_to", "jsonl,wandb"])


# --- real launcher runs ---------------------------------------------------------------------------------------

def scalars(tb_dir: str) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    files = glob.glob(os.path.join(tb_dir, "**", "events.out.tfevents.*"), recursive=True)
    assert len(files) == 1, files  # one writer: rank 0's
    acc = EventAccumulator(files[0])
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
def test_report_to_tensorboard_alone_writes_events_and_no_metrics_jsonl(tiny_model_dir, tmp_path):
    out = str(tmp_path / "tb_run")
    assert_ok(run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--report_to",
                                    "tensorboard", *RUN]))
    assert not os.path.exists(os.path.join(out, "metrics.jsonl"))
    assert not os.path.exists(os.path.join(out, "completions.jsonl"))
    tags = scalars(os.path.join(out, "tensorboard"))
    assert [step for step, _ in tags["reward/mean"]] == [1, 2]
    assert [step for step, _ in tags["actor/loss"]] == [1, 2]


@pytest.mark.slow
def test_report_to_none_writes_no_metrics_files_and_still_trains(tiny_model_dir, tmp_path):
    out = str(tmp_path / "quiet")
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--report_to", "none",
                                 *RUN])
    assert_ok(proc)
    assert "step 2 | reward" in proc.stdout  # the console line stays
    assert not any(os.path.exists(os.path.join(out, name)) for name in ("metrics.jsonl", "completions.jsonl",
                                                                         "tensorboard", "wandb"))
    assert os.path.isdir(os.path.join(out, "checkpoints", "step_2"))


@pytest.mark.slow
def test_wandb_offline_writes_one_run_from_rank_0_with_the_step_metrics(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is optional (requirements-wandb.txt); CI installs requirements.txt")
    monkeypatch.setenv("WANDB_MODE", "offline")  # no network here: the run is written for `wandb sync`
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = str(tmp_path / "wandb_run")
    assert_ok(run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--report_to", "jsonl,wandb",
                         *RUN], num_ranks=2, timeout=1500))
    with open(os.path.join(out, WANDB_ID_FILE)) as f:
        run_id = f.read().strip()
    runs = glob.glob(os.path.join(out, "wandb", "offline-run-*"))
    assert len(runs) == 1 and runs[0].endswith(f"-{run_id}"), runs  # one run: rank 0's
    with open(os.path.join(runs[0], f"run-{run_id}.wandb"), "rb") as f:
        log = f.read()
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))  # jsonl alongside: the same steps
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward/mean", "actor/loss", "time/step"):
        assert log.count(key.encode()) >= 2, key  # one history record per step carries each metric
