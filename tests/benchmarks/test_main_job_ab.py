"""benchmarks/main_job_ab.py --report: seconds per step after the first, B / A per seed, and the paired gain
difference, from the slim records."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks import main_job_ab
from tests.helpers import REPO_ROOT
from tests.procs import alive


def _run(folder, seconds, initial, final):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "time/step": t, "time/generate": t / 2,
                                                              "time/train": t / 4, "perf/mfu/actor": 0.1 * (i + 1)})
                                                  + "\n" for i, t in enumerate(seconds)))
    for name, acc in (("eval_initial", initial), ("eval_final", final)):
        (folder / name).mkdir()
        (folder / name / "results.json").write_text(json.dumps({"metrics": {"pass@1": acc}, "config": {"limit": 200}}))


def test_ratio_skips_the_first_step_and_gains_are_paired(tmp_path):
    runs = tmp_path / "runs"
    _run(runs / "a" / "seed_1", [30.0, 10.0, 10.0], 0.2, 0.4)
    _run(runs / "b" / "seed_1", [40.0, 8.0, 8.0], 0.2, 0.45)
    _run(runs / "a" / "seed_2", [30.0, 10.0, 12.0], 0.2, 0.5)
    _run(runs / "b" / "seed_2", [40.0, 8.8, 8.8], 0.2, 0.45)
    main_job_ab.main(["--seeds", "1,2", "--report", "--runs_dir", str(runs), "--results", str(tmp_path / "ab")])
    result = json.loads((tmp_path / "ab.json").read_text())
    assert result["ratios"] == [0.8, 0.8]
    assert abs(result["gain_diff"]["mean_diff"] - 0.0) < 1e-12  # +0.05 and -0.05
    report = (tmp_path / "ab.md").read_text()
    assert "**0.800 ± 0.000**" in report
    # where A's step went, the first step left out: 10.5 s a step (10, 10 and 10, 12), its update at 25% MFU
    assert "| A | 10.50 | 5.25 | 2.62 | 25.0% |" in report


def test_an_arm_from_an_older_checkout_without_the_mfu_metric_reports_it_as_not_logged(tmp_path):
    runs = tmp_path / "runs"
    _run(runs / "a" / "seed_1", [30.0, 10.0, 10.0], 0.2, 0.4)
    _run(runs / "b" / "seed_1", [40.0, 8.0, 8.0], 0.2, 0.45)
    metrics = runs / "a" / "seed_1" / "metrics.jsonl"  # a commit from before perf/mfu/actor existed
    metrics.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "perf/mfu/actor"}) + "\n"
                               for line in metrics.read_text().splitlines()))
    (tmp_path / "ab.json").write_text(json.dumps({"commits": {"a": "a4d3c47", "b": "b14bb3f"}}))  # the runs' record
    main_job_ab.main(["--seeds", "1", "--report", "--runs_dir", str(runs), "--results", str(tmp_path / "ab")])
    report = (tmp_path / "ab.md").read_text()
    assert "| A | 10.00 | 5.00 | 2.50 | not logged |" in report
    assert "Arm A ran commit a4d3c47. Arm B ran commit b14bb3f." in report


def test_a_checkout_without_the_training_script_is_refused_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main_job_ab.main(["--seeds", "1", "--report", "--a_checkout", str(tmp_path), "--runs_dir", str(tmp_path),
                          "--results", str(tmp_path / "ab")])
    assert "--a_checkout" in capsys.readouterr().err


def test_a_sigterm_to_the_comparison_stops_the_arms_running_training_script(tmp_path):
    """`kill PID` of main_job_ab.py used to leave its scripts/train.sh training, unseen, on the machine's cores. Here
    the arm's checkout holds a train.sh that records its process and waits (no training: the signal's path is under
    test, and it is the one compare.py's real runs take, tests/experiments/test_compare_signal.py)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    pids = tmp_path / "train_sh.pids"
    (checkout / "scripts" / "train.sh").write_text(f"echo $$ > {pids}\nsleep 120 &\necho $! >> {pids}\nwait\n")
    proc = subprocess.Popen([sys.executable, "benchmarks/main_job_ab.py", "--seeds", "1", "--a_checkout",
                             str(checkout), "--b_checkout", str(checkout), "--output_root", str(tmp_path / "out"),
                             "--runs_dir", str(tmp_path / "runs"), "--results", str(tmp_path / "ab")],
                            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=(tmp_path / "stderr").open("w"))
    # (files, not pipes: an orphaned train.sh would hold a pipe open and hang the read instead of failing the test)
    deadline = time.time() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.time() < deadline:
        time.sleep(0.1)
    assert pids.exists(), (tmp_path / "stderr").read_text()[-2000:]  # the arm's train.sh never started
    script, child = (int(p) for p in pids.read_text().split())
    proc.send_signal(signal.SIGTERM)  # to main_job_ab.py alone, as `kill PID` sends it
    proc.wait(timeout=60)
    err = (tmp_path / "stderr").read_text()
    assert proc.returncode != 0 and "stopped by SIGTERM" in err, err[-2000:]
    time.sleep(0.5)
    assert [pid for pid in (script, child) if alive(pid)] == []
    assert not os.path.exists(tmp_path / "ab.json")  # no report from a stopped comparison
