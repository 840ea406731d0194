"""rl/engine/zero_config.py: the default ZeRO stage by world size, and one-rank ZeRO-3, which keeps its parameters gathered
between optimizer steps and trains exactly as stage 0 and as the per-layer-gathering knobs did (a real DeepSpeed
engine on a tiny Llama, one process)."""
import pytest
import torch

from rl.engine.zero_config import MULTI_RANK_ZERO3, zero3_parameter_knobs
from tests.helpers import build_tiny_model, one_rank_process_group

STEPS, ACCUMULATION = 3, 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # hidden 128: the MLP matrices (128 x 256) are above the multi-rank persistence threshold (1e4), so the old knobs
    # really partition them (the default tiny model's are all below it)
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny128")), hidden_size=128)


def _actor(model_dir, stage):
    from rl.config import parse_args
    from rl.engine.actor import EngineSettings, build_actor
    args = parse_args(["--model_name_or_path", model_dir, "--env", "tests.fixture_envs:DigitFractionEnv",
                       "--output_dir", "unused", "--actor_zero_stage", str(stage), "--dtype", "fp32",
                       "--per_device_generation_batch_size", "2", "--num_generations", "2",
                       "--per_device_train_micro_batch_size", "2", "--actor_learning_rate", "1e-3",
                       "--lr_scheduler_type", "constant", "--num_warmup_steps", "0"])
    return build_actor(EngineSettings.from_args(args), 1, STEPS)


def torch_adamw(engine):
    """The torch AdamW inside a DeepSpeed engine's optimizer (ZeRO wraps it as `.optimizer`)."""
    optimizer = engine.optimizer
    while not isinstance(optimizer, torch.optim.AdamW):
        optimizer = optimizer.optimizer
    return optimizer


def _train(engine, on_micro_batch=None):
    """Losses of STEPS optimizer steps, ACCUMULATION micro-batches each, on fixed token batches."""
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(4, 90, (2, 12), generator=gen) for _ in range(STEPS * ACCUMULATION)]
    losses = []
    engine.train()
    for ids in batches:
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        if on_micro_batch is not None:
            on_micro_batch(engine)
        engine.step()
        losses.append(float(loss))
    return losses


@pytest.fixture(scope="module")
def runs(model_dir):
    """Per-micro-batch losses of stage 0, one-rank stage 3, and stage 3 with the multi-rank (per-layer gathering)
    knobs, plus whether every parameter was gathered after each non-final micro-batch's backward."""
    import rl.engine.actor
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    out = {"gathered": {}}

    def record_gathered(name):
        def check(engine):
            if not engine.is_gradient_accumulation_boundary():
                out["gathered"].setdefault(name, []).append(
                    all(p.ds_status == ZeroParamStatus.AVAILABLE for p in engine.module.parameters()))
        return check

    with one_rank_process_group():
        stage0, stage3 = _actor(model_dir, 0), _actor(model_dir, 3)
        out["fused"] = [torch_adamw(engine).defaults["fused"] for engine in (stage0, stage3)]
        out["stage0"] = _train(stage0)
        out["stage3"] = _train(stage3, record_gathered("stage3"))
        original = rl.engine.actor.zero3_parameter_knobs
        rl.engine.actor.zero3_parameter_knobs = lambda world_size: dict(MULTI_RANK_ZERO3)
        try:
            out["stage3_per_layer"] = _train(_actor(model_dir, 3), record_gathered("stage3_per_layer"))
        finally:
            rl.engine.actor.zero3_parameter_knobs = original
    return out


def test_one_rank_keeps_every_parameter_persistent_and_several_ranks_partition():
    assert zero3_parameter_knobs(1)["stage3_param_persistence_threshold"] >= 2 ** 62
    assert zero3_parameter_knobs(2) == MULTI_RANK_ZERO3


@pytest.mark.slow
def test_one_rank_zero3_keeps_every_parameter_gathered_between_micro_batches(runs):
    # persistent parameters are gathered on first use and then by every optimizer step (DeepSpeed's _post_step):
    # from the second step on, no micro-batch gathers or frees a layer
    assert runs["gathered"]["stage3"][1:] == [True] * (STEPS - 1)
    # the knobs it replaces released the large matrices after each layer: the check can fail
    assert runs["gathered"]["stage3_per_layer"] == [False] * STEPS


@pytest.mark.slow
def test_the_actor_steps_with_torchs_fused_adamw_at_stage_0_and_3(runs):
    assert runs["fused"] == [True, True]  # the one-kernel AdamW, not torch's per-parameter loop on CPU


@pytest.mark.slow
def test_one_rank_zero3_trains_with_the_same_losses_as_stage_0_and_as_per_layer_gathering(runs):
    assert runs["stage3"] == pytest.approx(runs["stage0"], rel=1e-5)
    assert runs["stage3"] == pytest.approx(runs["stage3_per_layer"], rel=1e-5)
    # lr 1e-3 moves the weights: later losses differ from the first, so equal sequences are not equal by accident
    assert runs["stage0"][-1] != pytest.approx(runs["stage0"][0], rel=1e-3)


@pytest.mark.parametrize("world_size, offload, stage", [("1", False, 0), ("2", False, 3), ("1", True, 3)])
def test_the_default_zero_stage_is_0_in_one_process_and_3_on_several_ranks_or_with_offload(world_size, offload,
                                                                                            stage):
    from types import SimpleNamespace

    from rl.engine.zero_config import resolve_zero_stage
    args = SimpleNamespace(actor_zero_stage=None, offload=offload)
    resolve_zero_stage(args, {"WORLD_SIZE": world_size})
    assert args.actor_zero_stage == stage


def test_an_explicit_zero_stage_is_kept_on_one_rank():
    from types import SimpleNamespace

    from rl.engine.zero_config import resolve_zero_stage
    args = SimpleNamespace(actor_zero_stage=3, offload=False)
    resolve_zero_stage(args, {"WORLD_SIZE": "1"})
    assert args.actor_zero_stage == 3
