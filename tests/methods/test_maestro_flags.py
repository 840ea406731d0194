"""rl/scoring.py (the open-domain reward flags) and rl/methods/maestro.py: the open-domain rewards as --reward_funcs for any method, the Conductor recipes, the weight
ablations and the KL-in-reward flag, as train.py parses them."""
import pytest

from rl.config import build_parser, parse_args


def parse(tiny_model_dir, *argv):
    return parse_args(["--model_name_or_path", tiny_model_dir, *argv])


def refused(tiny_model_dir, capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        parse(tiny_model_dir, *argv)
    return str(exc.value) + capsys.readouterr().err


@pytest.mark.parametrize("funcs", ["ppl", "ent", "fmt,len", "correctness,ppl"])
def test_open_domain_rewards_are_ordinary_reward_funcs_for_grpo(funcs, tiny_model_dir):
    """NOVER is --algo grpo --reward_funcs ppl, EM-GRPO is --reward_funcs ent."""
    assert parse(tiny_model_dir, "--algo", "grpo", "--reward_funcs", funcs).reward_funcs == funcs.split(",")


def test_pref_as_a_reward_func_needs_a_reward_model(tiny_model_dir, capsys):
    assert "pass --reward_model_name_or_path" in refused(tiny_model_dir, capsys, "--reward_funcs", "pref")


def test_paper_recipe_is_the_default_and_small_is_a_flagged_deviation(tiny_model_dir):
    paper = parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed")
    assert (paper.maestro_hidden_norm, paper.maestro_lr, paper.maestro_update_interval) == ("none", 5e-5, 3)
    small = parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed", "--maestro_recipe", "small")
    assert (small.maestro_hidden_norm, small.maestro_lr, small.maestro_update_interval) == ("l2", 2e-2, 1)
    mixed = parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed", "--maestro_recipe", "small",
                  "--maestro_update_interval", "2")
    assert (mixed.maestro_lr, mixed.maestro_update_interval) == (2e-2, 2)  # an explicit flag wins over the recipe


def test_both_random_ablations_are_offered(tiny_model_dir):
    for weights in ("random", "random_action", "equal", "conductor"):
        assert parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed", "--maestro_weights", weights).maestro_weights == weights


def test_kl_in_reward_is_off_by_default_and_maestro_only(tiny_model_dir, capsys):
    assert parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed").maestro_kl_in_reward == 0.0
    assert "needs --algo maestro" in refused(tiny_model_dir, capsys, "--maestro_kl_in_reward", "0.1")
    assert ">= 0" in refused(tiny_model_dir, capsys, "--algo", "maestro", "--env", "mixed", "--maestro_kl_in_reward", "-1")


def test_help_labels_the_emphasis_weights_as_credos_reading():
    helps = {a.dest: a.help for a in build_parser()._actions}
    assert "credo's reading" in helps["maestro_emphasis"] and "paper: 0.5" not in helps["maestro_emphasis"]
    assert "Dirichlet(1)" in helps["maestro_weights"]
    assert "0.1, its Table 7" in helps["maestro_kl_in_reward"]


def test_the_skipped_pref_warning_is_said_once_per_process(tiny_model_dir, caplog, monkeypatch):
    """compare.py --plan validates every run's flags in one process; the notice used to repeat once per run."""
    from rl.methods import maestro
    monkeypatch.setattr(maestro, "_PREF_SKIP_WARNED", [])
    with caplog.at_level("WARNING", logger=maestro.__name__):
        for _ in range(3):
            parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed")
    assert sum("`pref` reward is skipped" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("flag, default, other, bad, label", [
    ("maestro_reward_scale", "batch_rank", "none", "zscore", "credo's reading"),
    ("maestro_meta_reward", "advantage", "centred", "ranked", "credo's reading, not the paper's"),
])
def test_maestro_scale_flags_default_as_documented_refuse_other_values_and_label_credos_reading(
        flag, default, other, bad, label, tiny_model_dir, capsys):
    """--maestro_reward_scale (default batch_rank, credo's reading) and --maestro_meta_reward (default the paper's
    advantage; centred is credo's reading)."""
    assert getattr(parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed"), flag) == default
    assert getattr(parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed", f"--{flag}", other), flag) == other
    assert "invalid choice" in refused(tiny_model_dir, capsys, "--algo", "maestro", "--env", "mixed", f"--{flag}", bad)
    helps = {a.dest: a.help for a in build_parser()._actions}
    assert label in helps[flag] and "paper" in helps[flag]


def test_the_paper_recipe_sets_table_7s_training_settings_and_explicit_flags_win(tiny_model_dir):
    """--maestro_recipe paper: the KL 0.1 in the reward (docs/maestro.md's Table 7), GSPO's sequence-level ratio, the
    top-entropy mask 0.2 and the reference sync (issue #50's record of Table 7); unset, none of them."""
    paper = parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed", "--maestro_recipe", "paper")
    assert (paper.maestro_kl_in_reward, paper.loss_mode, paper.top_entropy_quantile, paper.sync_ref_model) == (
        0.1, "gspo", 0.2, True)
    assert paper.loss_agg_mode == "seq-mean-token-mean"  # GSPO's own aggregation follows the mode
    assert (paper.maestro_hidden_norm, paper.maestro_lr, paper.maestro_update_interval) == ("none", 5e-5, 3)
    unset = parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed")
    assert (unset.maestro_kl_in_reward, unset.loss_mode, unset.top_entropy_quantile, unset.sync_ref_model) == (
        0.0, "vanilla", 1.0, False)
    own = parse(tiny_model_dir, "--algo", "maestro", "--env", "mixed", "--maestro_recipe", "paper", "--loss_mode",
                "vanilla", "--top_entropy_quantile", "1", "--no-sync_ref_model", "--maestro_kl_in_reward", "0")
    assert (own.maestro_kl_in_reward, own.loss_mode, own.top_entropy_quantile, own.sync_ref_model) == (
        0.0, "vanilla", 1.0, False)
    grpo = parse(tiny_model_dir, "--algo", "grpo", "--maestro_recipe", "paper")  # MAESTRO's recipe, not GRPO's
    assert (grpo.loss_mode, grpo.sync_ref_model) == ("vanilla", False)
    helps = {a.dest: a.help for a in build_parser()._actions}
    assert "cannot set" in helps["maestro_recipe"] and "unchecked" in helps["maestro_recipe"]
