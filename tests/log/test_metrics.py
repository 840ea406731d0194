"""metrics.jsonl and completions.jsonl: strict JSON, one record per step, trimmed on resume; TensorBoard text."""
import json
import math

import pytest
import torch

from rl.log.step_metrics import completion_records, pick_rows
from rl.log.loggers import read_metrics
from rl.log.metrics import MetricsLogger
from rl.types import Rollout


def strict_json_lines(path):
    """Parse as strict JSON: Python's json accepts bare NaN / Infinity, most other parsers (jq, JS, pandas' ujson
    in strict mode) do not."""
    def refuse(name):
        raise ValueError(f"bare {name} in {path}")
    with open(path) as f:
        return [json.loads(line, parse_constant=refuse) for line in f]


def test_non_finite_metrics_are_written_as_null(tmp_path):
    logger = MetricsLogger(str(tmp_path), enabled=True)
    logger.log(1, {"reward/judge/mean": float("nan"), "actor/grad_norm": float("inf"),
                   "reward/mean": torch.tensor(0.5)})
    (record,) = strict_json_lines(tmp_path / "metrics.jsonl")
    assert record == {"step": 1, "reward/judge/mean": None, "actor/grad_norm": None, "reward/mean": 0.5}


def _scored_batch(n=8, groups=4, turns=1, turn_level=False):
    turn_scores = torch.full((n, turns), float("nan"))
    turn_scores[:, 0] = torch.linspace(0, 1, n)
    return Rollout(input_ids=torch.zeros(n, 2, dtype=torch.long), attention_mask=torch.ones(n, 2, dtype=torch.long),
                   response_mask=torch.ones(n, 1), prompt_len=1,
                   group_ids=torch.arange(groups).repeat_interleave(n // groups),
                   completions=[f"answer {i}" for i in range(n)], samples=[{}] * n, turn_scores=turn_scores,
                   prompts=[f"prompt {i // (n // groups)}" for i in range(n)], scores=torch.linspace(0, 1, n),
                   components={"correctness": torch.linspace(0, 1, n), "judge": torch.full((n,), float("nan"))},
                   advantages=torch.randn(n, turns) if turn_level else torch.randn(n))


def test_logged_completions_spread_over_prompts_and_carry_reward_and_advantage():
    batch = _scored_batch()
    records = completion_records(batch, 4)
    assert [r["prompt"] for r in records] == ["prompt 0", "prompt 1", "prompt 2", "prompt 3"]
    first = records[0]
    assert first["completion"] == "answer 0" and first["reward"] == 0.0 and first["group"] == 0
    assert first["components"] == {"correctness": 0.0, "judge": None}  # an abstention is null, not NaN
    assert first["advantage"] == pytest.approx(batch.advantages[0].item())
    assert completion_records(batch, 0) == [] and pick_rows(3, 10) == [0, 1, 2]
    assert "extras" not in first


def test_logged_completions_carry_the_methods_per_response_data():
    """MAESTRO's emphasis action per response (and TCPO's per-turn counterfactuals) are in the record, so a step's
    advantages can be recomputed from completions.jsonl with --log_completions >= the batch."""
    batch = _scored_batch()
    batch.extras = {"actions": torch.tensor([3, 0, 1, 2, 3, 0, 1, 2]),
                    "counterfactual": torch.tensor([[0.5, float("nan")]] * 8)}
    batch.samples = [{"kind": "arith"}] * 4 + [{}] * 4
    records = completion_records(batch, 8)
    assert [r.get("kind") for r in records] == ["arith"] * 4 + [None] * 4
    assert [r["extras"]["actions"] for r in records] == [3, 0, 1, 2, 3, 0, 1, 2]
    assert records[1]["extras"]["counterfactual"] == [0.5, None]


def test_turn_level_advantages_are_logged_per_turn_played():
    batch = _scored_batch(turns=3, turn_level=True)
    batch.turn_scores[0, 1] = 1.0
    batch.conversations = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                            {"role": "user", "content": "again"}, {"role": "assistant", "content": "a2"}]] * 8
    record = completion_records(batch, 1)[0]
    assert record["turn_scores"] == [0.0, 1.0] and record["turns"] == ["a1", "a2"]
    assert record["advantage"] == pytest.approx(batch.advantages[0, :2].tolist())


def test_completions_file_is_strict_json_and_a_resume_drops_the_lines_of_lost_steps(tmp_path):
    logger = MetricsLogger(str(tmp_path), enabled=True)
    for step in (1, 2, 3):
        logger.log_completions(step, completion_records(_scored_batch(), 2))
    assert [r["step"] for r in strict_json_lines(tmp_path / "completions.jsonl")] == [1, 1, 2, 2, 3, 3]
    MetricsLogger(str(tmp_path), enabled=True, start_step=2)  # resumed from the step-2 checkpoint
    assert [r["step"] for r in read_metrics(str(tmp_path / "completions.jsonl"))] == [1, 1, 2, 2]


def test_completions_reach_tensorboard_as_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    logger = MetricsLogger(str(tmp_path), enabled=True, tensorboard_path=str(tmp_path / "tb"))
    logger.log_completions(1, completion_records(_scored_batch(), 2))
    logger.close()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    (entry,) = events.Tensors("completions/text_summary")
    text = entry.tensor_proto.string_val[0].decode()
    assert "| prompt 0 | answer 0 |" in text and "| prompt 2 | answer 4 |" in text


def test_console_line_still_formats_nan():
    assert "reward nan" in MetricsLogger("unused", enabled=False).console_line(1, {"reward/mean": math.nan})


def test_console_line_shows_turn_conductor_and_dara_metrics_and_says_len_sums_the_turns():
    line = MetricsLogger("unused", enabled=False).console_line(3, {
        "reward/mean": 0.5, "response_length/mean": 40.0, "avg_turns": 2.5, "regression_rate": 0.25,
        "conductor/entropy": 1.2, "dara/w/correctness": 1.7, "dara/w/length": 1.0})
    assert "len(all turns) 40" in line and "turns 2.5" in line and "regress 0.25" in line
    assert "conductor_H 1.2" in line and "w_correctness 1.7" in line and "w_length 1" in line
    single = MetricsLogger("unused", enabled=False).console_line(1, {"response_length/mean": 12.0})
    assert "len 12" in single and "all turns" not in single


def test_console_line_counts_retried_and_failed_reward_calls_only_when_there_are_some():
    logger = MetricsLogger("unused", enabled=False)
    line = logger.console_line(2, {"reward/judge/retried": 3, "reward/judge/recovered": 2, "reward/judge/errors": 1,
                                   "reward/correctness/retried": 1, "reward/correctness/recovered": 1,
                                   "reward/correctness/errors": 0})
    assert "reward_retried 4 (recovered 3)" in line and "reward_failed 1" in line
    quiet = logger.console_line(2, {"reward/judge/retried": 0, "reward/judge/recovered": 0, "reward/judge/errors": 0})
    assert "reward_retried" not in quiet and "reward_failed" not in quiet
