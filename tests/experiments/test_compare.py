"""experiments/compare.py: pre-registered metric, config-hash cache, a killed sweep that resumes, a finished one reused."""
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time

import psutil
import pytest

from benchmarks.archive_pack import MARKER
from experiments import compare
from tests.helpers import REPO_ROOT
from tests.train.test_train_deepspeed import TINY_RUN


def test_first_sustained_step_needs_the_trailing_mean_to_stay_above_the_threshold():
    steps = [1, 2, 3, 4, 5, 6]
    assert compare.first_sustained_step(steps, [0, 1, 1, 0, 1, 1], 0.8, 1) == 5   # the dip at step 4 resets it
    assert compare.first_sustained_step(steps, [0, 1, 1, 1, 1, 1], 0.8, 3) == 4   # trailing-3 mean first >= 0.8
    assert compare.first_sustained_step(steps, [0, 1, 1, 1, 1, 0], 0.8, 1) is None


def test_a_malformed_metric_is_refused_with_the_forms_it_accepts():
    with pytest.raises(compare.CompareError, match="first_step:KEY:THRESHOLD:WINDOW"):
        compare.parse_metric("first_step:reward/mean:0.8")
    assert compare.parse_metric("first_step:reward/mean:0.8:3").higher_is_better is False
    assert compare.parse_metric("eval:pass@1").higher_is_better is True
    regression = compare.parse_metric("eval:regression_rate:lower")
    assert (regression.key, regression.higher_is_better) == ("regression_rate", False)
    assert "lower is better" in regression.describe()


def test_the_non_baseline_methods_are_also_paired_with_each_other_and_labelled_not_pre_registered():
    def seeds(*values):
        return [{"value": v, "also": {"eval:pass@1": 1 - v}} for v in values]
    runs = {"grpo": seeds(0.5, 0.6), "mt_grpo": seeds(0.2, 0.4), "tcpo": seeds(0.1, 0.1)}
    between = compare.between_methods(runs, "grpo", ["eval:regression_rate:lower", "eval:pass@1"])
    assert list(between["eval:regression_rate:lower"]) == ["tcpo vs mt_grpo"]  # never against the baseline
    assert between["eval:regression_rate:lower"]["tcpo vs mt_grpo"]["diffs"] == pytest.approx([-0.1, -0.3])
    assert between["eval:pass@1"]["tcpo vs mt_grpo"]["mean_diff"] == pytest.approx(0.2)
    assert compare.between_methods({"grpo": seeds(0.5), "tcpo": seeds(0.1)}, "grpo", ["m"]) == {}  # two methods
    result = {"name": "s", "deciding_metric": {"spec": "m", "description": "d", "higher_is_better": False},
              "baseline": "grpo", "methods": {k: "" for k in runs}, "seeds": [1, 2], "commit": "c" * 40,
              "config": {"train_args": "", "eval_args": "", "num_gpus": 1},
              "runs": {k: [dict(r, seed=i + 1, censored=False, commit="c" * 40) for i, r in enumerate(v)]
                       for k, v in runs.items()},
              "comparisons": {}, "between_methods": between}
    text = compare.report(result)
    assert "Between the non-baseline methods, not pre-registered: `eval:regression_rate:lower`" in text
    assert "| tcpo vs mt_grpo | 0.1000 | 0.3000 | -0.2000 ± 0.1000 |" in text


def test_a_sweep_cannot_switch_its_deciding_metric_after_the_first_invocation(tmp_path):
    path = str(tmp_path / "s.sweep.json")
    compare.preregister(path, compare.parse_metric("eval:pass@1"), "gdpo")
    compare.preregister(path, compare.parse_metric("eval:pass@1"), "gdpo")  # the same sweep again: fine
    with pytest.raises(compare.CompareError, match="pre-registered --metric eval:pass@1"):
        compare.preregister(path, compare.parse_metric("last:reward/mean"), "gdpo")


def test_a_sweep_continued_from_a_fresh_clone_keeps_the_archives_registration(tmp_path):
    from experiments.compare_archive import archive_sweep_file, restore_sweep_file
    first_cache, archive, fresh_cache = tmp_path / "c1", tmp_path / "archive", tmp_path / "c2"
    compare.preregister(str(first_cache / "s.sweep.json"), compare.parse_metric("eval:regression_rate:lower"), "grpo")
    archive_sweep_file(str(first_cache / "s.sweep.json"), str(archive))
    registered = (archive / "s.sweep.json").read_text()
    fresh = str(fresh_cache / "s.sweep.json")  # another machine: an empty cache, the committed archive
    restore_sweep_file(fresh, str(archive))
    with pytest.raises(compare.CompareError, match="pre-registered --metric eval:regression_rate:lower"):
        compare.preregister(fresh, compare.parse_metric("eval:pass@1"), "grpo")
    compare.preregister(fresh, compare.parse_metric("eval:regression_rate:lower"), "grpo")
    archive_sweep_file(fresh, str(archive))
    assert (archive / "s.sweep.json").read_text() == registered  # the registration time is the first invocation's


def test_flags_compare_sets_itself_are_refused_naming_where_they_came_from():
    with pytest.raises(compare.CompareError, match="--method dara: --seed is set by compare.py"):
        compare.refuse_owned_flags(["--algo", "dara", "--seed=3"], "--method dara")


def test_the_cache_key_is_the_resolved_config_so_equivalent_spellings_share_a_run(tiny_model_dir):
    base = ["--model_name_or_path", tiny_model_dir, "--output_dir", "x", "--dtype", "fp32"]
    key = lambda argv: compare.run_key(compare.resolved_config(argv, "test"), ["--limit", "2"], 1)  # noqa: E731
    default_spelled_out = key([*base, "--algo", "grpo", "--scale_rewards", "group"])
    assert key([*base, "--algo=grpo"]) == default_spelled_out
    assert key([*base, "--algo", "grpo", "--output_dir", "elsewhere"]) == default_spelled_out
    assert key([*base, "--algo", "grpo", "--seed", "7"]) != default_spelled_out
    assert compare.run_key(compare.resolved_config([*base, "--algo", "grpo"], "t"), ["--limit", "3"], 1) != \
        default_spelled_out
    with pytest.raises(compare.CompareError, match="--method bad: train.py refuses"):
        compare.resolved_config([*base, "--algo", "no_such_method"], "--method bad")


def _stamp(path):
    return os.stat(path).st_mtime_ns


def _completed(cache):
    return sorted(d for d in os.listdir(cache) if os.path.exists(os.path.join(cache, d, "run.json")))


def _leftovers(cache):
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(str(cache) in part for part in (proc.info["cmdline"] or [])):
            found.append(proc)
    return found


def _sweep_in_process(argv, capsys):
    """compare.py's main(ARGV) in this process (the sweep's train.py and eval.py runs are still real launches):
    its result and stdout. A refusal or failed run raises SystemExit naming it, as the script would exit."""
    capsys.readouterr()
    result = compare.main(argv)
    assert result is not None  # a report was written (main returns None only for --plan)
    return result, capsys.readouterr().out


@pytest.mark.slow
def test_a_killed_sweep_resumes_where_it_stopped_and_a_finished_one_comes_from_its_cache(tiny_model_dir, tmp_path,
                                                                                         monkeypatch, capsys):
    cache, prefix = tmp_path / "cache", tmp_path / "results" / "tiny"
    flags = ["--name", "tiny", "--seeds", "1,2",
             "--method", "grpo=--algo grpo", "--method", "dr_grpo=--algo grpo --scale_rewards none",
             "--train_args", shlex.join(["--model_name_or_path", tiny_model_dir, "--max_steps", "1", "--dtype", "fp32",
                                         *TINY_RUN]),
             "--eval_args", "--limit 2 --max_new_tokens 6", "--metric", "eval:pass@1", "--also", "last:reward/mean",
             "--cache_dir", str(cache), "--results", str(prefix)]
    env = dict(OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    for key, value in env.items():  # for the runs the in-process invocations below start
        monkeypatch.setenv(key, value)

    # 1. Kill the whole sweep (its process group, as Ctrl-C or a job scheduler does) once the first run is done.
    #    The script itself, in its own process: the later invocations run its main() here, which pays no interpreter
    #    start-up (each invocation's own work, the runs it starts included, is the same).
    sweep = subprocess.Popen([sys.executable, "experiments/compare.py", *flags], cwd=REPO_ROOT,
                             env=dict(os.environ, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    deadline = time.time() + 900
    while not (cache.exists() and _completed(cache)) and sweep.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    time.sleep(1)
    stray = _leftovers(cache)
    for proc in stray:  # only processes of this test's sweep (their command line names its cache folder)
        proc.kill()
    assert not stray, [p.info["cmdline"] for p in stray]
    done = _completed(cache)
    assert len(done) == 1, done
    first = cache / done[0]
    first_stamps = (_stamp(first / "run.json"), _stamp(first / "train" / "metrics.jsonl"))
    assert json.loads((cache / "tiny.sweep.json").read_text())["deciding_metric"] == "eval:pass@1"

    # 2. The same command again: the finished run is reused, the rest (the interrupted one included) run.
    _sweep_in_process(flags, capsys)
    result = json.loads(prefix.with_suffix(".json").read_text())
    assert (_stamp(first / "run.json"), _stamp(first / "train" / "metrics.jsonl")) == first_stamps
    assert result["ran_this_invocation"] == 3
    reused = [r for runs in result["runs"].values() for r in runs if not r["ran_this_invocation"]]
    assert [r["run_dir"] for r in reused] == [str(first)]
    assert result["seeds"] == [1, 2] and [r["seed"] for r in result["runs"]["dr_grpo"]] == [1, 2]
    assert result["deciding_metric"]["spec"] == "eval:pass@1"
    assert result["config"]["resolved"]["dr_grpo"]["scale_rewards"] == "none"
    assert result["comparisons"]["dr_grpo vs grpo"]["n"] == 2
    assert "| seed | grpo | dr_grpo |" in prefix.with_suffix(".md").read_text()
    for runs in result["runs"].values():
        for r in runs:
            with open(os.path.join(r["run_dir"], "eval", "results.json")) as f:
                assert r["value"] == json.load(f)["metrics"]["pass@1"]
            with open(os.path.join(r["run_dir"], "train", "metrics.jsonl")) as f:
                assert r["also"]["last:reward/mean"] == json.loads(f.readlines()[-1])["reward/mean"]
            # a finished run keeps its final model but not its resumable checkpoints (--keep_checkpoints keeps them)
            assert os.path.isdir(os.path.join(r["run_dir"], "train", "final"))
            assert not os.path.exists(os.path.join(r["run_dir"], "train", "checkpoints")), r["run_dir"]
    assert result["secondary_comparisons"]["last:reward/mean"]["dr_grpo vs grpo"]["n"] == 2

    # 3. Once more: nothing runs, every run's files are untouched, the same numbers come out.
    stamps = {d: _stamp(cache / d / "train" / "metrics.jsonl") for d in _completed(cache)}
    _, again_stdout = _sweep_in_process(flags, capsys)
    cached = json.loads(prefix.with_suffix(".json").read_text())
    assert cached["ran_this_invocation"] == 0
    assert {d: _stamp(cache / d / "train" / "metrics.jsonl") for d in _completed(cache)} == stamps
    assert len(stamps) == 4
    assert cached["comparisons"] == result["comparisons"]
    assert "running" not in again_stdout and again_stdout.count("cached") == 4

    # 4. --archive slims the cache to the report's inputs; that archive alone reproduces the report.
    archive = tmp_path / "archive"
    _sweep_in_process([*flags, "--archive", str(archive)], capsys)
    archived = sorted(str(p.relative_to(archive)) for p in archive.rglob("*") if p.is_file() and p.name != MARKER)
    # run.json, metrics.jsonl, eval results, and the evidence compressed: eval responses, training completions
    assert len(archived) == 1 + 4 * 5 and "tiny.sweep.json" in archived, archived
    with tarfile.open(str(archive) + ".tar.gz") as pack:  # what git keeps: the same files in one
        assert sorted(m.name.split("/", 1)[1] for m in pack.getmembers()) == archived
    assert not any("final" in name or "checkpoint" in name for name in archived), archived
    # the sweep script's own command, --archive included, with --cache_dir pointed at the archive
    from_archive = [*(a if a != str(cache) else str(archive) for a in flags), "--archive", str(archive)]
    _sweep_in_process(from_archive, capsys)
    again_result = json.loads(prefix.with_suffix(".json").read_text())
    assert again_result["ran_this_invocation"] == 0 and again_result["comparisons"] == result["comparisons"]
    # a later credo with one more flag gives every run another key: an archived run is still found by its command
    renamed = next(r for r in result["runs"]["grpo"] if r["seed"] == 1)["key"][:20]
    os.rename(archive / renamed, archive / "keyed_by_an_older_credo")
    _sweep_in_process(from_archive, capsys)
    by_command_result = json.loads(prefix.with_suffix(".json").read_text())
    assert by_command_result["ran_this_invocation"] == 0
    assert by_command_result["comparisons"] == result["comparisons"]
    assert by_command_result["runs"]["grpo"][0]["run_dir"] == str(archive / "keyed_by_an_older_credo")

    # 5. A sweep missing a run reports, with --partial, only the seeds finished under every method.
    missing = next(r for r in result["runs"]["dr_grpo"] if r["seed"] == 2)["key"][:20]
    os.remove(archive / missing / "run.json")
    _, partial_stdout = _sweep_in_process([*from_archive, "--partial"], capsys)
    partial_result = json.loads(prefix.with_suffix(".json").read_text())
    assert partial_result["partial"] is True and partial_result["seeds"] == [1]
    assert partial_result["ran_this_invocation"] == 0 and "running" not in partial_stdout
    assert "**Partial**" in prefix.with_suffix(".md").read_text()


def test_plan_validates_every_run_and_runs_nothing(tiny_model_dir, tmp_path, capsys):
    cache = tmp_path / "cache"
    argv = ["--name", "p", "--seeds", "1,2", "--method", "a=--algo grpo", "--train_args",
            f"--model_name_or_path {tiny_model_dir} --dtype fp32", "--metric", "eval:pass@1", "--cache_dir", str(cache)]
    with pytest.raises(SystemExit, match="--method b: train.py refuses"):  # gdpo with one reward: refused up front
        compare.main([*argv, "--method", "b=--algo gdpo", "--plan"])
    assert compare.main([*argv, "--method", "b=--algo grpo --scale_rewards none", "--plan"]) is None
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare:")]
    assert [line.split(":")[1].strip() for line in lines] == ["a seed 1", "b seed 1", "a seed 2", "b seed 2"]
    assert all("to run" in line for line in lines)
    assert not cache.exists()  # nothing pre-registered, nothing run


def test_partial_with_no_finished_pair_is_refused_naming_the_cache(tiny_model_dir, tmp_path):
    cache = tmp_path / "cache"
    argv = ["--name", "p", "--seeds", "1", "--method", "a=--algo grpo", "--method", "b=--algo grpo --scale_rewards none",
            "--train_args", f"--model_name_or_path {tiny_model_dir} --dtype fp32", "--metric", "eval:pass@1",
            "--cache_dir", str(cache), "--partial"]
    with pytest.raises(SystemExit, match=f"--partial: no seed is finished under every method in {cache}"):
        compare.main(argv)


def test_runs_the_archive_holds_count_as_finished_so_a_fresh_clone_runs_only_the_rest(tiny_model_dir, tmp_path, capsys):
    """A sweep longer than a sitting continues on another machine from its committed archive: the cache there is
    empty, and the runs the archive holds are not run again."""
    cache, archive = tmp_path / "cache", tmp_path / "archive"
    argv = ["--name", "p", "--seeds", "1", "--method", "a=--algo grpo", "--method", "b=--algo grpo --scale_rewards none",
            "--train_args", f"--model_name_or_path {tiny_model_dir} --dtype fp32", "--metric", "eval:pass@1",
            "--cache_dir", str(cache), "--archive", str(archive), "--plan"]

    def plan():
        compare.main(argv)
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare:")]
        return {line.split(":")[1].strip(): (line.split(": ")[2].split(" (")[0], line.rsplit("(", 1)[1].rstrip(")"))
                for line in lines}
    first = plan()
    assert [state for state, _ in first.values()] == ["to run", "to run"]
    kept = archive / first["a seed 1"][1]
    kept.mkdir(parents=True)
    (kept / "run.json").write_text(json.dumps({"train_argv": [], "eval_argv": None}))
    assert {name: state for name, (state, _) in plan().items()} == {"a seed 1": "cached", "b seed 1": "to run"}
    assert not cache.exists()


def test_a_value_the_parser_derives_never_splits_the_cache():
    """A derived value (rl/run/saved_config.py's DERIVED_VALUES) is already fixed by the flags it comes from; hashing
    it would give every run cached before it existed a new key, and a sweep would train them all again."""
    from rl.run.saved_config import DERIVED_VALUES
    assert DERIVED_VALUES <= set(compare.UNHASHED)
