"""rl.advantages.maestro: emphasis weights, the mixed reward, the rewards' common scale and the group advantage; group
rank normalisation."""
import pytest
import torch

from rewards.policy_rewards import group_rank_normalize
from rl.advantages import grpo, maestro
from rl.advantages.maestro import batch_rank, emphasis_weights, mixed_reward, scale_rewards
from tests.helpers import default_args


def test_emphasis_weights_put_eta_on_the_chosen_reward_and_share_the_rest():
    w = emphasis_weights(torch.tensor([0, 2]), num_rewards=4, eta=0.5)
    torch.testing.assert_close(w, torch.tensor([[0.625, 0.125, 0.125, 0.125], [0.125, 0.125, 0.625, 0.125]]))
    torch.testing.assert_close(emphasis_weights(torch.tensor([1]), 3, eta=1.0), torch.tensor([[0.0, 1.0, 0.0]]))
    torch.testing.assert_close(emphasis_weights(torch.tensor([1]), 4, eta=0.0), torch.full((1, 4), 0.25))


def test_mixed_reward_is_the_weighted_sum_with_abstentions_counting_zero():
    r = torch.tensor([[1.0, 0.5, float("nan")], [0.0, 1.0, 1.0]])
    w = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.2, 0.6]])
    torch.testing.assert_close(mixed_reward(r, w), torch.tensor([0.625, 0.8]))


def test_each_response_is_mixed_with_its_own_action_then_group_normalised():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    actions = torch.tensor([0, 1, 0, 1])
    gids = torch.tensor([0, 0, 1, 1])
    adv = maestro(rewards, actions, gids, eta=1.0, reward_scale="none")
    # pure emphasis: response 0 is scored by reward 0 (1.0), response 1 by reward 1 (0.0), and so on
    torch.testing.assert_close(adv, grpo(torch.tensor([1.0, 0.0, 0.0, 1.0]), gids))


def test_no_actions_means_equal_weights():
    rewards = torch.rand(6, 3)
    gids = torch.tensor([0, 0, 0, 1, 1, 1])
    torch.testing.assert_close(maestro(rewards, None, gids, reward_scale="none"), grpo(rewards.mean(1), gids))
    torch.testing.assert_close(maestro(rewards, None, gids), grpo(batch_rank(rewards).mean(1), gids))


def test_batch_rank_gives_every_reward_batch_mean_one_half_with_ties_averaged_and_abstentions_left_out():
    r = torch.tensor([[1.0, 3.0], [0.0, float("nan")], [1.0, -2.0], [1.0, 3.0], [0.0, 10.0]])
    out = batch_rank(r)
    torch.testing.assert_close(out[:, 0], torch.tensor([0.75, 0.125, 0.75, 0.75, 0.125]))  # ranks 3,0.5,3,3,0.5 / 4
    assert torch.isnan(out[1, 1])
    torch.testing.assert_close(out[[0, 2, 3, 4], 1], torch.tensor([0.5, 0.0, 0.5, 1.0]))
    torch.testing.assert_close(out[:, 0].mean(), torch.tensor(0.5))
    torch.testing.assert_close(batch_rank(torch.tensor([[4.0], [4.0]])), torch.tensor([[0.5], [0.5]]))
    torch.testing.assert_close(batch_rank(torch.tensor([[4.0]])), torch.tensor([[0.5]]))


def test_batch_rank_matches_the_group_rank_of_one_group():
    values = torch.randint(0, 5, (40,)).float()
    torch.testing.assert_close(batch_rank(values[:, None])[:, 0], group_rank_normalize(values, torch.zeros(40).long()))


def test_a_shifted_or_stretched_reward_mixes_identically_on_the_batch_rank_scale():
    """The mechanism behind the issue-19 collapse: under `none` a reward's offset moves every advantage of the
    responses that emphasised it; on the batch-rank scale any increasing transform of a reward changes nothing."""
    torch.manual_seed(0)
    rewards, actions = torch.rand(16, 2), torch.randint(0, 2, (16,))
    gids = torch.arange(4).repeat_interleave(4)
    moved = rewards * torch.tensor([1.0, 5.0]) + torch.tensor([0.0, 1.0])
    torch.testing.assert_close(maestro(moved, actions, gids), maestro(rewards, actions, gids))
    assert not torch.allclose(maestro(moved, actions, gids, reward_scale="none"),
                              maestro(rewards, actions, gids, reward_scale="none"))


def test_an_unknown_reward_scale_is_refused():
    with pytest.raises(ValueError, match="batch_rank"):
        scale_rewards(torch.rand(3, 2), "zscore")


def test_rank_normalisation_maps_each_group_onto_zero_to_one():
    values = torch.tensor([3.0, 1.0, 2.0, 10.0, 10.0, -5.0, 7.0])
    gids = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    out = group_rank_normalize(values, gids)
    torch.testing.assert_close(out, torch.tensor([1.0, 0.0, 0.5, 0.75, 0.75, 0.0, 0.5]))


def test_rank_normalisation_leaves_abstentions_out():
    out = group_rank_normalize(torch.tensor([float("nan"), 2.0, 1.0, 5.0, 5.0]), torch.tensor([0, 0, 0, 1, 1]))
    assert torch.isnan(out[0])
    torch.testing.assert_close(out[1:], torch.tensor([1.0, 0.0, 0.5, 0.5]))


def test_batch_advantage_follows_the_scores_the_hook_mixed_not_equal_weights():
    """`random` (a Dirichlet weight vector per response) and --maestro_kl_in_reward set the scores without actions:
    the advantage must be that of those scores, not of an equal-weight mix of the components."""
    from types import SimpleNamespace

    from rl.methods.maestro import Maestro
    from rl.types import GlobalBatch
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    weights = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8], [0.2, 0.8]])
    gids = torch.tensor([0, 0, 1, 1])
    scores = mixed_reward(rewards, weights)
    inputs = GlobalBatch(scores=scores, group_ids=gids, lengths=torch.ones(4),
                         components={"a": rewards[:, 0], "b": rewards[:, 1]})
    flags = default_args(maestro_weights="random", maestro_emphasis=0.5, maestro_kl_in_reward=0.0,
                            maestro_reward_scale="batch_rank", maestro_meta_reward="advantage", scale_rewards="group")
    adv, _ = Maestro.from_args(flags).advantages(inputs)
    torch.testing.assert_close(adv, grpo(scores, gids))
    assert adv[0] > 0 and adv[3] > 0  # the equal mix would give every response the same reward: all zeros


def test_scalarize_mixes_the_batch_ranked_rewards_and_logs_each_rewards_level_per_kind():
    """The trainer's path (rl/methods/maestro.py): the components are put on --maestro_reward_scale's scale over the
    batch before w . r, and `maestro/level/<kind>/<reward>` is the mean the Conductor's meta-reward ranks."""
    from types import SimpleNamespace

    from rl.methods.maestro import Maestro

    class Batch(SimpleNamespace):
        def __len__(self):
            return len(self.group_ids)
    components = {"fmt": torch.tensor([1.0, 1.0, 0.0, 1.0]), "len": torch.tensor([2.0, 3.0, 4.0, 5.0])}
    batch = Batch(group_ids=torch.tensor([0, 0, 1, 1]), policy_hidden=torch.zeros(4, 3), extras={},
                  samples=[{"kind": "x"}, {"kind": "x"}, {"kind": "y"}, {"kind": "y"}], reward_raw=components)
    flags = default_args(maestro_weights="equal", maestro_emphasis=0.5, maestro_kl_in_reward=0.0,
                            maestro_reward_scale="batch_rank", maestro_meta_reward="advantage", scale_rewards="group",
                            maestro_rewards=["fmt", "len"],
                            reward_model_name_or_path=None, maestro_lr=0.0, maestro_entropy_coef=0.0,
                            maestro_update_interval=1, maestro_tau_init=1.0, maestro_hidden_norm="none", seed=0)
    ctx = SimpleNamespace(actor=SimpleNamespace(config=SimpleNamespace(hidden_size=3)), rank=0)
    method = Maestro.from_args(flags, ctx)
    scores = method.scalarize(batch, components)
    ranked = batch_rank(torch.stack([components["fmt"], components["len"]], 1))
    torch.testing.assert_close(scores, ranked.mean(1))
    metrics = method.after_score(batch, {})
    assert metrics["maestro/level/x/len"] == pytest.approx(ranked[:2, 1].mean().item())
    assert metrics["maestro/level/y/fmt"] == pytest.approx(ranked[2:, 0].mean().item())
    flags.maestro_reward_scale = "none"
    torch.testing.assert_close(Maestro.from_args(flags, ctx).scalarize(batch, components), torch.tensor([1.5, 2.0, 2.0, 3.0]))


def test_the_conductor_learns_from_the_advantage_or_with_centred_from_the_group_centred_mixed_reward():
    """--maestro_meta_reward: `advantage` (the paper) buffers the GRPO advantage the policy trains on; `centred`
    buffers w . r minus its group mean, without the std division that makes the advantage count wins, not margins
    (issue 42). The policy's advantage is the same under both."""
    from types import SimpleNamespace

    from rl.methods.maestro import Maestro
    from rl.types import GlobalBatch
    scores, gids = torch.tensor([0.1, 0.9, 0.2, 0.3, 0.6, 0.6]), torch.tensor([0, 0, 0, 1, 1, 1])
    inputs = GlobalBatch(scores=scores, group_ids=gids, lengths=torch.ones(6), components={})
    buffered = {}
    for meta in ("advantage", "centred"):
        flags = default_args(maestro_weights="conductor", maestro_emphasis=0.5, maestro_kl_in_reward=0.0,
                                maestro_reward_scale="batch_rank", maestro_meta_reward=meta, scale_rewards="group",
                                maestro_rewards=["fmt", "len"], reward_model_name_or_path=None, maestro_lr=0.0,
                                maestro_entropy_coef=0.0, maestro_update_interval=2, maestro_tau_init=1.0,
                                maestro_hidden_norm="none", seed=0)
        method = Maestro.from_args(flags, SimpleNamespace(actor=SimpleNamespace(config=SimpleNamespace(hidden_size=3)), rank=0))
        adv, _ = method.advantages(inputs)
        torch.testing.assert_close(adv, grpo(scores, gids))                     # the policy's advantage
        method.pending = (torch.zeros(6, 3), torch.zeros(6, dtype=torch.long))
        method.after_advantages(inputs, adv, {})
        buffered[meta] = method.learner.buffer[0][2]
    torch.testing.assert_close(buffered["advantage"], grpo(scores, gids))
    torch.testing.assert_close(buffered["centred"], torch.tensor([-0.3, 0.5, -0.2, -0.2, 0.1, 0.1]))
