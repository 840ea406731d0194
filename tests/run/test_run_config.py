"""Runs that never mix: config.json, which flags define an experiment, the per-experiment default output folder,
the output-folder lock, and the start decision (fresh / resume / refuse / finished) of rl/run/start.py."""
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from rl.config import build_parser, parse_args
from rl.errors import TrainingAborted
from rl.run.manifest import checkpoint_files, file_entries, write_manifest
from rl.run.saved_config import (HARMLESS_FLAGS, OutputDirBusy, RunMismatch, acquire_output_lock, default_output_dir,
                           flag_differences, method_flags, plain_flags, read_run_config, release_output_lock)
from rl.config import parser_defaults
from rl.run.start import StartSettings, start_run
from tests.helpers import REPO_ROOT

ENV = ["--env", "tests.fixture_envs:DigitFractionEnv"]


def flags(tiny_model_dir, out, *extra):
    return parse_args(["--model_name_or_path", tiny_model_dir, *ENV, "--output_dir", str(out), *extra])


def fake_checkpoint(out, step, args):
    """A complete step folder as a save of `args` leaves it (manifest with the method flags)."""
    folder = os.path.join(out, "checkpoints", f"step_{step}")
    os.makedirs(folder)
    with open(os.path.join(folder, "rng_rank0.pt"), "wb") as f:
        f.write(b"x" * 64)
    write_manifest(folder, file_entries(folder, checkpoint_files(folder)), step, 1, method_flags(plain_flags(args)))
    with open(os.path.join(out, "checkpoints", "latest"), "w") as f:
        f.write(f"step_{step}\n")


def test_every_harmless_flag_is_a_real_flag():
    dests = {a.dest for a in build_parser()._actions}
    assert HARMLESS_FLAGS <= dests, HARMLESS_FLAGS - dests


def test_differences_name_the_method_flags_and_ignore_the_harmless_ones(tiny_model_dir, tmp_path):
    old = plain_flags(flags(tiny_model_dir, tmp_path))
    new = plain_flags(flags(tiny_model_dir, tmp_path / "elsewhere", "--actor_learning_rate", "1e-3",
                            "--num_generations", "8", "--max_steps", "99", "--save_steps", "1", "--code_workers", "1"))
    assert flag_differences(old, new, parser_defaults()) == ["--actor_learning_rate 2e-05 -> 0.001",
                                                            "--num_generations 4 -> 8"]


def test_a_flag_an_old_run_did_not_record_differs_only_when_not_at_its_default(tiny_model_dir, tmp_path):
    new = plain_flags(flags(tiny_model_dir, tmp_path))
    old = {k: v for k, v in new.items() if k != "top_k"}
    assert flag_differences(old, new, parser_defaults()) == []
    new["top_k"] = 5
    assert flag_differences(old, new, parser_defaults()) == ["--top_k 0 -> 5"]


def test_the_default_output_dir_is_new_for_every_experiment(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, *ENV])
    assert args.output_dir is None and args.tensorboard_path is None  # chosen by the trainer, one for all ranks
    assert default_output_dir("grpo", "arith").startswith("output/grpo_arith_")
    assert default_output_dir("gdpo", "tests.fixture_envs:DigitFractionEnv").startswith(
        "output/gdpo_digitfractionenv_")


def test_a_fresh_run_writes_its_resolved_config_with_versions_and_commit(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = parse_args(["--model_name_or_path", tiny_model_dir, *ENV])
    start = start_run(StartSettings.from_args(first), 1, parser_defaults())
    assert start.output_dir.startswith("output/grpo_digitfractionenv_") and start.resume is None
    config = read_run_config(start.output_dir)
    assert config["flags"]["algo"] == "grpo" and config["flags"]["output_dir"] == start.output_dir
    assert config["versions"]["torch"] and config["versions"]["deepspeed"] and config["versions"]["python"]
    head = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert config["git_commit"].startswith(head.strip())
    assert start.tensorboard_path == os.path.join(start.output_dir, "tensorboard")
    assert config["flags"]["tensorboard_path"] == start.tensorboard_path


def test_resume_auto_refuses_a_checkpoint_of_another_experiment_naming_the_flags(tiny_model_dir, tmp_path):
    fake_checkpoint(tmp_path, 1, flags(tiny_model_dir, tmp_path))
    other = flags(tiny_model_dir, tmp_path, "--algo", "gdpo", "--reward_funcs", "correctness,format",
                  "--actor_learning_rate", "1e-3")
    with pytest.raises(RunMismatch) as err:
        start_run(StartSettings.from_args(other), 5, parser_defaults())
    message = str(err.value)
    assert "--algo grpo -> gdpo" in message and "--actor_learning_rate 2e-05 -> 0.001" in message
    assert "--reward_funcs correctness -> correctness,format" in message and "--resume force" in message
    assert not os.path.exists(tmp_path / "config.json")  # nothing of the old run was touched


def test_resume_force_continues_the_other_experiment_with_a_warning(tiny_model_dir, tmp_path, caplog):
    fake_checkpoint(tmp_path, 1, flags(tiny_model_dir, tmp_path))
    other = flags(tiny_model_dir, tmp_path, "--actor_learning_rate", "1e-3", "--resume", "force")
    with caplog.at_level(logging.WARNING):
        start = start_run(StartSettings.from_args(other), 5, parser_defaults())
    assert start.resume.tag == "step_1" and not start.finished
    assert "--actor_learning_rate 2e-05 -> 0.001" in caplog.text


def test_harmless_changes_resume_and_a_run_at_its_last_step_is_finished(tiny_model_dir, tmp_path):
    fake_checkpoint(tmp_path, 3, flags(tiny_model_dir, tmp_path))
    same = flags(tiny_model_dir, tmp_path, "--max_steps", "3", "--save_steps", "1", "--code_workers", "1")
    start = start_run(StartSettings.from_args(same), 3, parser_defaults())
    assert start.finished and start.resume.step == 3
    assert not os.path.exists(tmp_path / "config.json")  # a finished run is left as it is
    more = start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--max_steps", "6")), 6, parser_defaults())
    assert not more.finished and more.resume.step == 3
    assert read_run_config(str(tmp_path))["flags"]["max_steps"] == 6


def test_config_records_the_machine_and_a_resume_on_another_says_it_will_not_repeat_bit_for_bit(
        tiny_model_dir, tmp_path, caplog):
    import torch
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--dtype", "fp32")), 5, parser_defaults())
    config = read_run_config(str(tmp_path))
    assert config["machine"]["torch_threads"] == torch.get_num_threads() and config["machine"]["dtype"] == "fp32"
    assert config["machine"]["cpu"] and config["machine"]["bf16_isa"] in ("amx", "avx512_bf16", "none")
    fake_checkpoint(tmp_path, 1, flags(tiny_model_dir, tmp_path, "--dtype", "fp32"))
    with caplog.at_level(logging.WARNING):
        start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--dtype", "fp32")), 5, parser_defaults())
    assert "another machine" not in caplog.text  # the same machine: nothing to say
    config["machine"]["torch_threads"] += 1  # as if the last run had computed with one thread more
    with open(tmp_path / "config.json", "w") as f:
        json.dump(config, f)
    with caplog.at_level(logging.WARNING):
        start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--dtype", "fp32")), 5, parser_defaults())
    assert (f"another machine than its last run (torch_threads {torch.get_num_threads() + 1} -> "
            f"{torch.get_num_threads()})") in caplog.text


def test_a_run_that_never_saved_is_not_overwritten_by_another_experiment(tiny_model_dir, tmp_path):
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path)), 5, parser_defaults())  # crashed before its first checkpoint
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')  # ... after training a step
    with pytest.raises(RunMismatch, match="config.json .metrics.jsonl has trained steps"):
        start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--top_p", "0.9")), 5, parser_defaults())
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--top_p", "0.9", "--resume", "none")), 5, parser_defaults())
    assert read_run_config(str(tmp_path))["flags"]["top_p"] == 0.9


HOLD_LOCK = ("import sys, time; from rl.run.saved_config import acquire_output_lock; "
             "acquire_output_lock(sys.argv[1]); print('locked', flush=True); time.sleep(600)")


def test_a_second_trainer_on_a_locked_output_dir_is_refused_naming_the_holder(tmp_path):
    # cwd: `python -c` imports rl from the folder it starts in, this checkout (whatever the venv's install points at)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputDirBusy) as err:
            acquire_output_lock(str(tmp_path))
        assert f"pid {holder.pid}" in str(err.value) and str(tmp_path) in str(err.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the kernel released the dead holder's lock: no stale lock to clean up by hand
    deadline = time.time() + 10
    while True:
        try:
            acquire_output_lock(str(tmp_path))
            break
        except OutputDirBusy:
            assert time.time() < deadline
            time.sleep(0.1)
    release_output_lock(str(tmp_path))


def test_an_output_dir_that_is_a_file_is_refused_naming_the_flag(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    with pytest.raises(TrainingAborted, match=f"--output_dir {path}: cannot be created"):
        acquire_output_lock(str(path))


def test_an_unreadable_config_json_is_refused_naming_it(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(TrainingAborted, match=str(tmp_path / "config.json")):
        read_run_config(str(tmp_path))


def test_the_config_json_is_plain_json(tiny_model_dir, tmp_path):
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--reward_weights", "1")), 5, parser_defaults())
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    assert config["flags"]["reward_weights"] == [1.0] and config["flags"]["reward_funcs"] == ["correctness"]
