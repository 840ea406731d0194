"""DAPO's dynamic sampling rounds (rl/rollout/dynamic_sampling.py) and the joining of their rows (rl/rollout/rows.py), in
one process; tests/train/test_train_dapo.py trains with them under the launcher on two ranks."""
import pytest
import torch

from rl.rollout.dynamic_sampling import FilterGroupsExhausted, FilterSettings, collect_groups, groups_with_spread, spread_values
from rl.rollout.rows import join_rows
from rl.types import Rollout

G = 2
PAD = 0


def _settings(max_rounds=10, metric="reward", per_component=False):
    return FilterSettings(filter_groups=True, filter_groups_metric=metric, filter_groups_max_rounds=max_rounds,
                          per_component=per_component)


def _rollout(group_scores, first_id, prompt_len, resp_len, seed=0):
    """A scored rollout of len(group_scores) groups of G rows: random tokens, varied prompt and response lengths."""
    gen = torch.Generator().manual_seed(seed)
    n = len(group_scores) * G
    ids = torch.randint(4, 60, (n, prompt_len + resp_len), generator=gen)
    attention = torch.ones_like(ids)
    p_real = torch.randint(1, prompt_len + 1, (n,), generator=gen)
    r_real = torch.randint(1, resp_len + 1, (n,), generator=gen)
    for i in range(n):
        attention[i, :prompt_len - p_real[i]] = 0
        attention[i, prompt_len + r_real[i]:] = 0
    ids[attention == 0] = PAD
    turn_ids = torch.where(attention[:, prompt_len:].bool(), 0, -1)
    scores = torch.tensor([s for group in group_scores for s in group], dtype=torch.float32)
    return Rollout(input_ids=ids, attention_mask=attention, response_mask=(turn_ids >= 0).float(),
                   prompt_len=prompt_len, group_ids=torch.arange(first_id, first_id + len(group_scores)).repeat_interleave(G),
                   completions=[f"c{first_id}.{i}" for i in range(n)], samples=[{"row": i} for i in range(n)],
                   turn_ids=turn_ids, turn_scores=scores[:, None].clone(), scores=scores, correctness=scores.clone(),
                   components={"correctness": scores.clone()}, prompts=[f"p{i}" for i in range(n)])


def test_groups_whose_responses_all_tie_are_dropped_and_a_lone_response_is_kept():
    values = torch.tensor([[1.0], [1.0], [0.0], [1.0], [0.5], [0.5], [0.3]])
    kept, dropped = groups_with_spread(values, torch.tensor([7, 7, 8, 8, 9, 9, 10]))
    assert kept == [8, 10] and dropped == [7, 9]


def test_a_method_that_normalises_each_component_keeps_a_group_whose_components_trade_off():
    batch = _rollout([[1.0, 1.0]], 0, 3, 3)
    batch.components = {"correctness": torch.tensor([1.0, 0.0]), "length": torch.tensor([0.0, 1.0])}
    assert groups_with_spread(spread_values(batch, _settings()), batch.group_ids)[0] == []  # GRPO: the sum ties
    assert groups_with_spread(spread_values(batch, _settings(per_component=True)), batch.group_ids)[0] == [0]


def test_the_summed_reward_drops_a_dara_group_whose_components_trade_off_to_the_same_sum():
    """DARA's D.1 filters on the summed reward; the any-component rule (`reward`) keeps the same group."""
    batch = _rollout([[1.0, 1.0], [1.0, 2.0]], 0, 3, 3)  # scores: the weighted sums, as the scorer writes them
    batch.components = {"tool_format": torch.tensor([1.0, 0.0, 1.0, 1.0]),
                        "tool_correct": torch.tensor([0.0, 1.0, 0.0, 1.0])}
    summed = spread_values(batch, _settings(metric="reward_sum", per_component=True))
    assert summed.shape == (4, 1) and groups_with_spread(summed, batch.group_ids) == ([1], [0])
    assert groups_with_spread(spread_values(batch, _settings(per_component=True)), batch.group_ids)[0] == [0, 1]


def test_the_correctness_metric_reads_the_verifier_score_not_the_shaped_reward():
    batch = _rollout([[1.0, 0.7]], 0, 3, 3)
    batch.correctness = torch.tensor([1.0, 1.0])  # same answer right twice; the reward differs by length shaping
    assert groups_with_spread(spread_values(batch, _settings(metric="correctness")), batch.group_ids)[0] == []


def test_rounds_continue_until_the_quota_is_full_and_surplus_groups_are_discarded():
    rounds = iter([_rollout([[1, 1], [0, 1], [0, 0]], 0, 4, 5, seed=1),     # one group with spread
                   _rollout([[0, 0], [0, 0], [0, 0]], 3, 6, 2, seed=2),     # none
                   _rollout([[1, 0], [0.5, 0.2], [1, 0]], 6, 2, 7, seed=3)])  # three: one fills, two surplus
    batch, metrics = collect_groups(lambda: next(rounds), _settings(), quota=2, pad_token_id=PAD)
    assert batch.group_ids.tolist() == [1, 1, 6, 6]
    assert metrics["filter_groups/rounds"] == 3 and metrics["filter_groups/kept_groups"] == 2
    assert metrics["filter_groups/dropped_groups"] == 5 and metrics["filter_groups/surplus_groups"] == 2
    assert metrics["filter_groups/responses"] == 4
    assert batch.completions == ["c0.2", "c0.3", "c6.0", "c6.1"] and batch.scores.tolist() == [0, 1, 1, 0]


def test_at_the_round_cap_the_step_stops_with_an_error_naming_the_flag():
    def draw():
        return _rollout([[0, 0], [1, 1]], 0, 3, 3)
    with pytest.raises(FilterGroupsExhausted, match="after 3 rounds \\(--filter_groups_max_rounds 3\\)"):
        collect_groups(draw, _settings(max_rounds=3), quota=1, pad_token_id=PAD)


def test_a_cap_of_zero_draws_as_many_rounds_as_it_takes():
    rounds = iter([_rollout([[0, 0]], i, 3, 3) for i in range(14)] + [_rollout([[0, 1]], 14, 3, 3)])
    batch, metrics = collect_groups(lambda: next(rounds), _settings(max_rounds=0), quota=1, pad_token_id=PAD)
    assert metrics["filter_groups/rounds"] == 15 and batch.group_ids.tolist() == [14, 14]


def test_joined_rows_keep_their_tokens_and_their_log_probs(tiny_model_dir):
    """Re-padding rows of rounds with other widths changes no real token, no response mask and no log-prob."""
    from transformers import AutoModelForCausalLM
    from rl.update.batching import response_logprobs
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    a, b = _rollout([[0, 1], [1, 1]], 0, 3, 6, seed=4), _rollout([[1, 0]], 2, 7, 2, seed=5)
    joined = join_rows([(a, torch.tensor([0, 1])), (b, torch.tensor([1]))], PAD)
    assert joined.prompt_len == 7 and joined.response_mask.shape == (3, 6)
    with torch.no_grad():
        before = [response_logprobs(model, x.input_ids[rows], x.attention_mask[rows], x.prompt_len, 1.0)[0]
                  for x, rows in ((a, [0, 1]), (b, [1]))]
        after = response_logprobs(model, joined.input_ids, joined.attention_mask, joined.prompt_len, 1.0)[0]
    for i, (x, row, logp) in enumerate([(a, 0, before[0][0]), (a, 1, before[0][1]), (b, 1, before[1][0])]):
        mask = x.response_mask[row].bool()
        assert torch.equal(joined.response_ids[i][:mask.numel()][mask], x.response_ids[row][mask])
        assert torch.equal(joined.input_ids[i][joined.attention_mask[i].bool()], x.input_ids[row][x.attention_mask[row].bool()])
        assert torch.allclose(after[i][:mask.numel()][mask], logp[mask], atol=1e-5)
        assert joined.response_mask[i].sum() == mask.sum()
    assert joined.samples == [a.samples[0], a.samples[1], b.samples[1]]
    assert joined.components["correctness"].tolist() == [0.0, 1.0, 0.0]


def test_joined_rows_keep_what_the_decode_loop_recorded_for_them():
    """The rounds' sampling signals follow their rows (right-padded like every response-aligned field): the rollout
    correction reads the decode loop's log-probs from them, and a dropped signal would leave it nothing to weigh."""
    from rl.rollout.sampling_signals import SamplingSignals
    a, b = _rollout([[0, 1], [1, 1]], 0, 3, 6, seed=4), _rollout([[1, 0]], 2, 7, 2, seed=5)
    for x, base in ((a, 10.0), (b, 20.0)):
        rows = torch.arange(len(x))[:, None].float()
        x.signals = SamplingSignals(logp=-(base + rows) * x.response_mask, entropy=(base + rows) * x.response_mask,
                                    last_hidden=torch.full((len(x), 3), base) + rows)
    joined = join_rows([(a, torch.tensor([0, 3])), (b, torch.tensor([1]))], PAD)
    assert joined.signals.logp.shape == joined.response_mask.shape == (3, 6)
    for i, (x, row) in enumerate([(a, 0), (a, 3), (b, 1)]):
        mask = x.response_mask[row].bool()
        assert torch.equal(joined.signals.logp[i][:mask.numel()][mask], x.signals.logp[row][mask])
        assert torch.equal(joined.signals.entropy[i][:mask.numel()][mask], x.signals.entropy[row][mask])
        assert torch.equal(joined.signals.last_hidden[i], x.signals.last_hidden[row])
    assert joined.signals.logp[2, 2:].abs().sum() == 0  # b's rows are 2 wide: padding records nothing
    assert joined.signals.prefixes is None
    b.signals = None  # a round without signals: the joined rollout has none (a consumer then does its own forward)
    assert join_rows([(a, torch.tensor([0])), (b, torch.tensor([1]))], PAD).signals is None
