"""Resume on another layout (#62 item 7): the session's 2-rank ZeRO-3 run (tests/conftest.py's zero3_two_rank_run,
its checkpoint at step 4) resumed for one more step at 1, 2 and 4 ranks, the prompts a step kept (4: 4 x 1, 2 x 2,
1 x 4 per rank). The ZeRO partitions reach the new layout through DeepSpeed's universal checkpoint; the sampling
streams cannot (rl/run/reshard.py), so the resumed step samples with top-k 1, which leaves nothing to chance: the
step's metrics and the weights after it must then equal those of the same step at the saved layout, to float
rounding. The weights after the step depend on the Adam moments, so a moment dropped or misplaced in the reshard
shows there; the data position after it shows the prompts were the same.

--resume force because --top_k is a method-defining flag (the run trained with sampling); every arm passes it."""
import concurrent.futures
import os

import pytest
import torch

from rl.log.loggers import read_metrics
from rl.run.checkpoint import trainer_state_of
from rl.run.reshard import prompts_per_step
from tests.helpers import ZERO3_TWO_RANK_RUN, rewind_run, run_train, run_train_in_process
from rl.log.step_metrics import CLOCK_METRICS

TIMING_PREFIXES = CLOCK_METRICS
LAYOUTS = {2: 2, 1: 4, 4: 1}  # ranks: --per_device_generation_batch_size (4 prompts a step)


def resume_args(model_dir, out, ranks, *more):
    return ["--model_name_or_path", model_dir, "--output_dir", out, *ZERO3_TWO_RANK_RUN,
            "--per_device_generation_batch_size", str(LAYOUTS[ranks]), *more]


@pytest.fixture(scope="module")
def resumed(zero3_two_rank_run, tiny_model_dir, tmp_path_factory):
    """{ranks: (its output folder, what it printed)}, each resumed from the shared run's step_4 for step 5. Side by
    side: their results do not depend on timing (fixed seeds, top-k 1, one thread per rank), and on a loaded machine
    the three take about half the wall time together."""
    saved, outs, runs = zero3_two_rank_run[0], {}, {}
    with concurrent.futures.ThreadPoolExecutor(len(LAYOUTS)) as pool:
        for ranks in LAYOUTS:
            outs[ranks] = rewind_run(saved, str(tmp_path_factory.mktemp(f"layout_{ranks}") / "run"), 4)
            runs[ranks] = pool.submit(run_train, resume_args(tiny_model_dir, outs[ranks], ranks, "--max_steps", "5",
                                                             "--top_k", "1", "--resume", "force"),
                                      num_ranks=ranks, timeout=900)
    for ranks, run in runs.items():
        proc = run.result()
        assert proc.returncode == 0, f"{ranks} ranks: exit {proc.returncode}\n{proc.stdout[-3000:]}\n" \
                                     f"{proc.stderr[-4000:]}"
        outs[ranks] = (outs[ranks], proc.stdout + proc.stderr)
    return outs


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 4])
def test_a_2_rank_checkpoint_resumed_at_another_rank_count_trains_the_same_next_step(resumed, ranks):
    (reference, _), (out, said) = resumed[2], resumed[ranks]
    row, expected = read_metrics(os.path.join(out, "metrics.jsonl"))[-1], \
        read_metrics(os.path.join(reference, "metrics.jsonl"))[-1]
    assert row["step"] == expected["step"] == 5
    compared = [k for k in expected if not k.startswith(TIMING_PREFIXES)]
    assert len(compared) > 20 and expected["actor/grad_norm"] > 0  # a real update (the KL to the mixed reference)
    for key in compared:
        assert row[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-6), key
    # the same prompts: the data stream's position and every prompt it drew
    state, expected_state = (trainer_state_of(os.path.join(o, "checkpoints", "step_5")) for o in (out, reference))
    assert state["data"] == expected_state["data"] and state["data"]["position"] == 5 * 4
    # the same weights after the update, so the same Adam moments before it
    from transformers import AutoModelForCausalLM
    weights, expected_weights = (AutoModelForCausalLM.from_pretrained(os.path.join(o, "final")).state_dict()
                                 for o in (out, reference))
    for name in expected_weights:
        torch.testing.assert_close(weights[name], expected_weights[name], rtol=1e-5, atol=1e-6, msg=name)
    assert f"saved at 2 ranks, on {ranks}" in said and "re-seeded from --seed, the step (4) and the rank" in said
    assert not [n for n in os.listdir(os.path.join(out, "checkpoints")) if n.startswith(".universal")]


@pytest.mark.slow
def test_resume_auto_at_another_rank_count_compares_the_prompts_a_step(zero3_two_rank_run, tiny_model_dir, tmp_path):
    """In this process, at 1 rank: the flags that keep 4 prompts a step are the same experiment (the run is found
    finished at --max_steps 4, before any model loads); the flag as saved (2 prompts a step now) is another one."""
    out = rewind_run(zero3_two_rank_run[0], str(tmp_path / "run"), 4)
    same = run_train_in_process(resume_args(tiny_model_dir, out, 1))
    assert same.returncode == 0 and "is finished" in same.stdout, same.stderr[-3000:]
    other = run_train_in_process(resume_args(tiny_model_dir, out, 2))  # 2 per rank at 1 rank
    assert other.returncode != 0
    assert ("--per_device_generation_batch_size 2 at 2 ranks (4 prompts a step) -> 2 at 1 ranks (2; "
            "--per_device_generation_batch_size 4 keeps them)") in other.stderr, other.stderr[-3000:]


@pytest.mark.parametrize("world,per_rank,difference", [
    (4, 1, None),
    (1, 4, None),
    (2, 2, None),  # the same layout: compared as before
    (3, 1, "no whole --per_device_generation_batch_size keeps them at 3 ranks: pick a rank count that divides 4"),
    (8, 1, "-> 1 at 8 ranks (8; no whole"),
])
def test_prompts_per_rank_are_compared_as_prompts_a_step(world, per_rank, difference):
    saved = {"per_device_generation_batch_size": 2, "seed": 1}
    compared, found = prompts_per_step(saved, 2, {"per_device_generation_batch_size": per_rank}, world)
    if difference is None:
        assert found is None and compared["per_device_generation_batch_size"] == (per_rank if world != 2 else 2)
    else:
        assert difference in found and compared["per_device_generation_batch_size"] == per_rank
