"""experiments/mechanisms/maestro_meta_reward.py: the analysis that splits a real MAESTRO run's Conductor gradient into
what the meta-reward pushes for and what its own action draws added (issue 42). Its numbers are only as good as its
reconstruction of the run, so these check it against credo's own code: the advantages it recomputes, the exact level
formula without std scaling, and the REINFORCE gradient rl/methods/maestro_conductor.py takes. A few seconds on one thread."""
import json

import pytest
import torch

from experiments.mechanisms import maestro_meta_reward as meta
from rl.advantages.maestro import batch_rank, maestro
from rl.methods.maestro_conductor import Conductor, reinforce_loss
from tests.experiments.test_mechanisms import one_thread  # noqa: F401 (the module's autouse fixture: tiny tensors, one thread)

REWARDS = ["fmt", "ppl", "ent", "len"]


def fake_run(tmp_path, steps=2, groups=4, size=4, seed=0):
    """completions.jsonl and metrics.jsonl as train.py --algo maestro --log_completions >= the batch writes them."""
    gen = torch.Generator().manual_seed(seed)
    n, k = groups * size, len(REWARDS)
    with open(tmp_path / "completions.jsonl", "w") as c, open(tmp_path / "metrics.jsonl", "w") as m:
        for step in range(1, steps + 1):
            rewards = torch.rand((n, k), generator=gen).round(decimals=1)
            probs = torch.softmax(torch.randn((n, k), generator=gen), 1)
            actions = torch.multinomial(probs, 1, generator=gen).squeeze(1)
            group_ids = torch.arange(groups).repeat_interleave(size)
            adv = maestro(rewards, actions, group_ids, eta=0.5, scale="group", reward_scale="batch_rank")
            kinds = ["arith" if g % 2 else "describe" for g in group_ids.tolist()]
            for i in range(n):
                c.write(json.dumps({"step": step, "group": int(group_ids[i]), "kind": kinds[i],
                                    "components": dict(zip(REWARDS, rewards[i].tolist())),
                                    "advantage": float(adv[i]),
                                    "extras": {"actions": int(actions[i]), "pi": probs[i].tolist()}}) + "\n")
            pi = {f"conductor/pi/{kind}/{name}": 0.25 for kind in ("arith", "describe") for name in REWARDS}
            m.write(json.dumps({"step": step, **pi}) + "\n")
    return tmp_path


def test_without_std_scaling_the_signal_is_the_exact_level_formula():
    """--scale_rewards none: D_ik = eta (1 - 1/G) (r_ik - sum_j pi_ij r_ij), whatever the others drew
    (rl/advantages/maestro.py's derivation, per response)."""
    gen = torch.Generator().manual_seed(1)
    scaled, group_ids = torch.rand((8, 3), generator=gen), torch.arange(2).repeat_interleave(4)
    probs = torch.softmax(torch.randn((8, 3), generator=gen), 1)
    d = meta.meta_signal(scaled, group_ids, probs, eta=0.5, grpo_scale="none", draws=2, gen=gen)
    formula = 0.5 * (1 - 1 / 4) * (scaled - (probs * scaled).sum(1, keepdim=True))
    torch.testing.assert_close(d, formula.to(torch.float64), atol=1e-6, rtol=0)


def test_the_realized_gradient_is_the_conductors_own_reinforce_gradient_on_its_bias():
    """mean_i A_i (1[a_i = k] - pi_ik) is minus the gradient of rl/methods/maestro_conductor.py's loss on the bias b_k (tau 1, no
    entropy bonus): the analysis measures the update the run took, not a stand-in."""
    gen = torch.Generator().manual_seed(2)
    conductor = Conductor(5, 4)
    torch.nn.init.normal_(conductor.head.weight, generator=gen)
    h, adv = torch.randn((12, 5), generator=gen), torch.randn(12, generator=gen)
    probs = conductor(h)
    actions = torch.multinomial(probs.detach(), 1, generator=gen).squeeze(1)
    loss, _ = reinforce_loss(probs, actions, adv, entropy_coef=0.0)
    loss.backward()
    realized = meta.realized_gradient(adv, actions, probs.detach()).mean(0)
    torch.testing.assert_close(realized.float(), -conductor.head.bias.grad, atol=1e-5, rtol=1e-4)


def test_a_run_is_reconstructed_from_its_logged_rows_or_refused(tmp_path):
    result = meta.analyse(str(fake_run(tmp_path)), REWARDS, eta=0.5, draws=2)
    assert result["reconstruction_max_abs_error"] < 1e-5 and result["per_response_pi"]
    assert set(result["signal"]["as run"][1]) == {"arith", "describe", meta.ALL}
    assert "# MAESTRO's meta-reward" in meta.report(result)
    rows = [json.loads(line) for line in open(tmp_path / "completions.jsonl")]
    rows[3]["advantage"] += 0.5                              # not the run's advantage: the flags or rows differ
    with open(tmp_path / "completions.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with pytest.raises(SystemExit, match="step 1's logged advantages differ"):
        meta.analyse(str(tmp_path), REWARDS, eta=0.5, draws=2)


def test_group_rank_gives_every_reward_the_level_one_half_in_every_group():
    values, group_ids = torch.tensor([[1.0, 5.0], [0.0, 2.0], [3.0, 3.0], [0.0, 9.0]]), torch.tensor([0, 0, 1, 1])
    ranked = meta.group_rank(values, group_ids)
    torch.testing.assert_close(ranked[:2], batch_rank(values[:2]))
    assert ranked[:2].mean(0).tolist() == [0.5, 0.5] and ranked[2:].mean(0).tolist() == [0.5, 0.5]


def test_a_centred_run_is_split_under_the_meta_reward_it_learned_from(tmp_path):
    """--maestro_meta_reward centred: the Conductor's gradient is read from s_i - mean_group(s), not from the
    logged (policy's) advantages, and its expected part from the 'no std' signal."""
    run = fake_run(tmp_path, steps=1)
    as_advantage = meta.analyse(str(run), REWARDS, eta=0.5, draws=2)
    (run / "config.json").write_text(json.dumps({"flags": {"maestro_meta_reward": "centred"}}))  # as train.py writes
    centred = meta.analyse(str(run), REWARDS, eta=0.5, draws=2)
    assert (as_advantage["meta_reward"], centred["meta_reward"]) == ("advantage", "centred")
    (run / "config.json").write_text(json.dumps({"maestro_meta_reward": "centred"}))   # not train.py's layout
    with pytest.raises(SystemExit, match="config.json: no `flags`"):
        meta.analyse(str(run), REWARDS, eta=0.5, draws=2)
    (run / "config.json").write_text(json.dumps({"flags": {"maestro_meta_reward": "centred"}}))
    rows = [json.loads(line) for line in open(run / "completions.jsonl")]
    rewards = torch.tensor([[r["components"][n] for n in REWARDS] for r in rows])
    actions = torch.tensor([r["extras"]["actions"] for r in rows])
    probs = torch.tensor([r["extras"]["pi"] for r in rows])
    group_ids = torch.tensor([r["group"] for r in rows])
    centred_signal = maestro(rewards, actions, group_ids, eta=0.5, scale="none", reward_scale="batch_rank")
    want = meta.realized_gradient(centred_signal, actions, probs).mean(0)
    assert centred["gradient"]["realized"][1][meta.ALL] == pytest.approx(want.tolist(), abs=1e-6)
    assert as_advantage["gradient"]["realized"][1][meta.ALL] != pytest.approx(want.tolist(), abs=1e-6)


def test_the_summary_puts_runs_side_by_side_with_the_spread_over_runs(tmp_path):
    from experiments.mechanisms import maestro_meta_reward_summary as summary
    paths = []
    for seed in (0, 1):
        run = tmp_path / f"run{seed}"
        run.mkdir()
        result = meta.analyse(str(fake_run(run, steps=2, seed=seed)), REWARDS, eta=0.5, draws=2)
        paths.append(str(run / "result.json"))
        with open(paths[-1], "w") as f:
            json.dump(result, f)                      # as write() stores it: step keys become strings
    s = summary.summarize(paths)
    early = [r["early_signal"]["as run"][0] for r in s["runs"]]
    assert s["early_signal_across_runs"]["as run"][0][0] == pytest.approx(sum(early) / 2)
    assert [len(r["final_pi"]) for r in s["runs"]] == [4, 4] and "| run1 | advantage |" in summary.report(s)
    rows = [json.loads(line) for line in open(tmp_path / "run0" / "completions.jsonl")]
    first, last, shares = s["runs"][0]["at_top"][0]                  # steps 1-5: the fake run's two steps
    assert (first, last) == (1, 5)
    assert shares[3] == pytest.approx(sum(r["components"]["len"] == 1.0 for r in rows) / len(rows))
    swapped = summary.summarize(paths, baseline=paths[::-1])          # run0 - run1, then run1 - run0
    assert swapped["paired_final_pi"]["len"]["mean_diff"] == pytest.approx(0.0, abs=1e-12)
    assert swapped["paired_final_pi"]["len"]["diffs"][0] == pytest.approx(
        s["runs"][0]["final_pi"][3] - s["runs"][1]["final_pi"][3])
    with pytest.raises(SystemExit, match="pair them seed by seed"):
        summary.summarize(paths, baseline=paths[:1])


def test_one_minus_a_group_rank_is_the_rank_under_the_opposite_sign():
    """What --flip relies on: rewards/policy_rewards' group rank of -x is 1 - its rank of x, ties and NaN included."""
    from rewards.policy_rewards import group_rank_normalize
    x = torch.tensor([0.3, 0.1, 0.3, float("nan"), 2.0, 2.0, 2.0, 7.0, 4.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 3])       # ties, a NaN, a constant group, groups of one
    flipped = meta.flip(group_rank_normalize(x, groups)[:, None], [0])[:, 0]
    torch.testing.assert_close(group_rank_normalize(-x, groups), flipped, equal_nan=True)


def test_a_flipped_reward_reads_the_run_as_if_it_had_logged_the_opposite_sign(tmp_path):
    """--flip ent on a run equals the analysis of the same rows logged with ent = 1 - value (and the advantages that
    those rows give the logged actions): every condition's signal, both gradient parts and the top-block shares."""
    from experiments.mechanisms import maestro_meta_reward_summary as summary
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = fake_run(tmp_path / "old", steps=2)
    rows = [json.loads(line) for line in open(old / "completions.jsonl")]
    for step in (1, 2):
        picked = [r for r in rows if r["step"] == step]
        for r in picked:
            r["components"]["ent"] = 1.0 - r["components"]["ent"]
        rewards = torch.tensor([[r["components"][n] for n in REWARDS] for r in picked])
        actions = torch.tensor([r["extras"]["actions"] for r in picked])
        group_ids = torch.tensor([r["group"] for r in picked])
        adv = maestro(rewards, actions, group_ids, eta=0.5, scale="group", reward_scale="batch_rank")
        for r, a in zip(picked, adv.tolist()):
            r["advantage"] = a
    with open(tmp_path / "new" / "completions.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "new" / "metrics.jsonl").write_text((old / "metrics.jsonl").read_text())
    flipped = meta.analyse(str(old), REWARDS, eta=0.5, draws=2, flipped=("ent",))
    rewritten = meta.analyse(str(tmp_path / "new"), REWARDS, eta=0.5, draws=2)
    assert flipped["flipped"] == ["ent"] and "Reversed sign: ent" in meta.report(flipped)
    for key in ("signal", "gradient"):
        assert json.dumps(flipped[key], sort_keys=True) == json.dumps(rewritten[key], sort_keys=True)
    assert summary.at_top(flipped["run"], REWARDS, [(1, 2)], flipped["flipped"]) == \
        summary.at_top(rewritten["run"], REWARDS, [(1, 2)])
    with pytest.raises(SystemExit, match="--flip pref: not among"):
        meta.analyse(str(old), REWARDS, eta=0.5, draws=2, flipped=("pref",))
