"""experiments/density_check.py: DARA's densities over the stretch before the sparse reward is learned."""
import json

from experiments import density_check


def _row(sparse_mean, rho_s, rho_d, w_s, w_d=1.0):
    return {"reward/fmt/mean": sparse_mean, "dara/rho/fmt": rho_s, "dara/rho/acc": rho_d,
            "dara/w/fmt": w_s, "dara/w/acc": w_d}


def test_stretch_ends_at_the_first_step_the_sparse_mean_reaches_the_threshold():
    rows = [_row(0.1, 0.25, 1.0, 2.0), _row(0.3, 1.0, 0.5, 1.0), _row(0.6, 0.25, 1.0, 3.0), _row(0.2, 0.1, 1.0, 5.0)]
    s = density_check.stretch_summary(rows, "fmt", "acc", until=0.5)
    # steps 1-2 only: the later step back under 0.5 does not count, nor the one that reached it
    assert s["steps"] == 2 and s["sparse_lower"] == 1
    assert s["rho_dense_mean"] == 0.75 and s["w_sparse_mean"] == 1.5 and s["w_dense_mean"] == 1.0


def test_a_run_that_starts_above_the_threshold_has_an_empty_stretch():
    s = density_check.stretch_summary([_row(0.9, 0.25, 1.0, 2.0)], "fmt", "acc", until=0.5)
    assert s["steps"] == 0 and s["w_sparse_mean"] is None


def test_report_skips_runs_without_dara_metrics_and_totals_the_rest(tmp_path):
    for name, method, seed, rows in [("a", "gdpo", 1, [{"reward/fmt/mean": 0.1}]),
                                     ("b", "dara", 1, [_row(0.1, 0.25, 1.0, 2.0), _row(0.7, 0.5, 1.0, 1.0)]),
                                     ("c", "dara", 2, [_row(0.1, 0.25, 1.0, 2.0), _row(0.2, 1.0, 1.0, 1.0)])]:
        (tmp_path / name / "train").mkdir(parents=True)
        (tmp_path / name / "run.json").write_text(json.dumps({"method": method, "seed": seed}))
        (tmp_path / name / "train" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = density_check.report(str(tmp_path), "fmt", "acc", 0.5)
    assert "gdpo" not in text
    assert "| dara | 1 | 1 | 1 |" in text and "| dara | 2 | 2 | 1 |" in text
    assert "| all | | 3 | 2 |" in text
