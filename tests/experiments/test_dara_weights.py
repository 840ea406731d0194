"""experiments/dara_weights.py: which reward each DARA run up-weighted, read off its logged dara/* keys."""
import pytest

from experiments import dara_weights
from tests.experiments.test_sweep_curves import _run


def dara_row(w_format, w_think, binds=0.0, think_active=1.0):
    return {"dara/w/tool_format": w_format, "dara/w/think_length": w_think, "dara/cap_binds/tool_format": binds,
            "dara/cap_binds/think_length": 0.0, "dara/active_groups/tool_format": 2.0,
            "dara/active_groups/think_length": think_active}


def test_up_weighted_steps_mean_and_cap_per_run_and_reward_and_other_methods_skipped(tmp_path, capsys):
    _run(tmp_path, "a", "dara-asym", 1, [dara_row(1.41, 1.0), dara_row(1.0, 1.73, think_active=0.0),
                                         dara_row(5.0, 1.0, binds=1.0)])
    _run(tmp_path, "b", "gdpo", 1, [{"reward/tool_format/mean": 0.5}] * 3)
    dara_weights.main([str(tmp_path)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + 2  # header, rule, one row per reward of the one DARA run (no DVAO or GD²PO-Hard run)
    assert "| dara-asym | 1 | tool_format | 2 of 3 | 2.470 | 5.00 | 1 | 3 |" in lines
    assert "| dara-asym | 1 | think_length | 1 of 3 | 1.243 | 1.73 | 0 | 2 |" in lines


def test_a_folder_without_dara_runs_is_refused_naming_it(tmp_path):
    _run(tmp_path, "b", "gdpo", 1, [{"reward/tool_format/mean": 0.5}])
    with pytest.raises(SystemExit, match=str(tmp_path)):
        dara_weights.main([str(tmp_path)])


def test_dvao_shares_gd2po_drops_and_the_steps_dara_moved_are_reported(tmp_path, capsys):
    _run(tmp_path, "a", "dara-asym", 1, [dara_row(1.0, 1.0), dara_row(1.0, 1.73), dara_row(1.0, 1.0)])
    _run(tmp_path, "c", "dvao", 1, [{"dvao/w/tool_format": 0.7, "dvao/w/tool_correct": 0.3},
                                    {"dvao/w/tool_format": 0.4, "dvao/w/tool_correct": 0.6}])
    _run(tmp_path, "d", "gd2po-hard", 1, [{"gd2po/dropped_frac": 0.25, "gd2po/query_weight_mean": 0.75},
                                          {"gd2po/dropped_frac": 0.0, "gd2po/query_weight_mean": 1.0}])
    dara_weights.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "dara-asym seed 1: 1 of 3" in out  # only the second step moved a weight off 1
    assert "| dvao | 1 | tool_format | 0.550 | 1 of 2 |" in out
    assert "| dvao | 1 | tool_correct | 0.450 | 1 of 2 |" in out
    assert "| gd2po-hard | 1 | 0.125 | 1 of 2 | 0.875 |" in out
