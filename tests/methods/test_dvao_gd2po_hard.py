"""rl/methods/dvao.py and rl/methods/gd2po_hard.py: their flags as train.py parses them, and the step's metrics
(dvao/w/<reward>, gd2po/dropped_frac) from the batch-global view."""
import pytest
import torch

from rl.config import parse_args
from rl.methods import build_method
from rl.types import GlobalBatch


def parse(tiny_model_dir, *argv):
    return parse_args(["--model_name_or_path", tiny_model_dir, *argv])


def refused(tiny_model_dir, capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        parse(tiny_model_dir, *argv)
    return str(exc.value) + capsys.readouterr().err


def batch():
    """2 groups of 4: `sparse` varies in group 0 only; response 1 of group 0 has a sign conflict."""
    dense = torch.tensor([1., 0., 1., 0., 1., 1., 0., 0.])
    sparse = torch.tensor([1., 1., 0., 0., 0., 0., 0., 0.])
    return GlobalBatch(scores=dense + sparse, group_ids=torch.arange(8) // 4, lengths=torch.full((8,), 3),
                       components={"dense": dense, "sparse": sparse})


@pytest.mark.parametrize("algo", ["dvao", "gd2po_hard"])
def test_each_needs_two_rewards(algo, tiny_model_dir, capsys):
    assert "needs at least two rewards" in refused(tiny_model_dir, capsys, "--algo", algo)


def test_dvao_refuses_negative_base_weights(tiny_model_dir, capsys):
    text = refused(tiny_model_dir, capsys, "--algo", "dvao", "--reward_funcs", "correctness,length",
                   "--reward_weights", "1,-1")
    assert "--reward_weights as its base weights" in text


def test_gd2po_placement_flag_is_refused_under_another_method(tiny_model_dir, capsys):
    text = refused(tiny_model_dir, capsys, "--algo", "gdpo", "--reward_funcs", "correctness,length",
                   "--gd2po_weight_at", "loss")
    assert "--gd2po_weight_at is read by --algo gd2po_hard only" in text


def test_gd2po_defaults_to_the_authors_placement(tiny_model_dir):
    args = parse(tiny_model_dir, "--algo", "gd2po_hard", "--reward_funcs", "correctness,length")
    assert args.gd2po_weight_at == "advantage" and args.final_norm == "response"


def test_dvao_logs_the_weight_of_each_reward(tiny_model_dir):
    args = parse(tiny_model_dir, "--algo", "dvao", "--reward_funcs", "correctness,length")
    adv, metrics = build_method("dvao", args).advantages(batch())
    assert adv.shape == (8,) and torch.isfinite(adv).all()
    # group 0: both vary equally (share 1/2 each); group 1: only `dense` varies (share 1 and 0)
    assert metrics["dvao/w/dense"] == pytest.approx(0.75) and metrics["dvao/w/sparse"] == pytest.approx(0.25)
    assert (metrics["dvao/live_groups"], metrics["dvao/active_groups/sparse"]) == (2.0, 1.0)


@pytest.mark.parametrize("weight_at", ["advantage", "loss"])
def test_gd2po_logs_the_dropped_share(weight_at, tiny_model_dir):
    args = parse(tiny_model_dir, "--algo", "gd2po_hard", "--reward_funcs", "correctness,length",
                 "--gd2po_weight_at", weight_at)
    adv, metrics = build_method("gd2po_hard", args).advantages(batch())
    assert metrics["gd2po/dropped_frac"] == pytest.approx(2 / 8)  # responses 1 and 2 of group 0 conflict
    assert metrics["gd2po/groups_with_drops"] == 1.0 and adv[[1, 2]].abs().sum().item() == 0
