"""rl.advantages.maestro: emphasis weights, the mixed reward, and the group advantage; group rank normalisation."""
import torch

from rewards.policy_rewards import group_rank_normalize
from rl.advantages import grpo, maestro
from rl.advantages.maestro import emphasis_weights, mixed_reward


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
    adv = maestro(rewards, actions, gids, eta=1.0)
    # pure emphasis: response 0 is scored by reward 0 (1.0), response 1 by reward 1 (0.0), and so on
    torch.testing.assert_close(adv, grpo(torch.tensor([1.0, 0.0, 0.0, 1.0]), gids))


def test_no_actions_means_equal_weights():
    rewards = torch.rand(6, 3)
    gids = torch.tensor([0, 0, 0, 1, 1, 1])
    torch.testing.assert_close(maestro(rewards, None, gids), grpo(rewards.mean(1), gids))


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
    flags = SimpleNamespace(maestro_weights="random", maestro_emphasis=0.5, maestro_kl_in_reward=0.0,
                            scale_rewards="group")
    adv, _ = Maestro(flags).advantages(inputs)
    torch.testing.assert_close(adv, grpo(scores, gids))
    assert adv[0] > 0 and adv[3] > 0  # the equal mix would give every response the same reward: all zeros
