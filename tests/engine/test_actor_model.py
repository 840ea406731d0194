"""--gradient_checkpointing (rl/engine/actor.py): activations are recomputed in backward, and training with it gives
the same losses and weights as without (the trade is memory for time, never the result)."""
import os

import pytest
import torch

from rl.engine.actor import prepare_actor_model
from rl.engine.lora import LoraSettings
from rl.log.loggers import read_metrics
from tests.helpers import default_args, run_train_in_process


def tiny(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path)


def layer_forward_calls(model, checkpointing: bool) -> int:
    """How often decoder layer 0's MLP runs for one forward + backward in training mode."""
    model = prepare_actor_model(model, checkpointing, LoraSettings.from_args(default_args()))
    model.train()
    calls, mlp = [], model.model.layers[0].mlp
    forward = mlp.forward  # counted by wrapping forward: torch runs the recomputation without module hooks

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)
    mlp.forward = counted
    ids = torch.randint(4, 90, (2, 12))
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    return len(calls)


def test_checkpointing_recomputes_each_layer_in_backward(tiny_model_dir):
    assert layer_forward_calls(tiny(tiny_model_dir), checkpointing=False) == 1
    assert layer_forward_calls(tiny(tiny_model_dir), checkpointing=True) == 2


def test_checkpointing_gives_the_same_gradients(tiny_model_dir):
    grads = []
    for checkpointing in (False, True):
        model = prepare_actor_model(tiny(tiny_model_dir), checkpointing, LoraSettings.from_args(default_args()))
        model.train()
        ids = torch.arange(4, 40).reshape(2, 18)
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


def test_checkpointing_works_with_lora_adapters(tiny_model_dir):
    model = prepare_actor_model(tiny(tiny_model_dir), True, LoraSettings.from_args(default_args(lora_r=4)))
    model.train()
    ids = torch.randint(4, 90, (2, 12))
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()  # non-reentrant: no input_require_grads
    grads = [p.grad for n, p in model.named_parameters() if ".lora_A." in n]
    assert grads and all(g is not None for g in grads)
    assert model.get_base_model().is_gradient_checkpointing


TINY_RUN = ["--env", "tests.fixture_envs:DigitFractionEnv", "--num_generations", "4",
            "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "12", "--temperature", "1.0",
            "--actor_learning_rate", "1e-2", "--num_train_samples", "200", "--actor_zero_stage", "3",
            "--max_steps", "2", "--beta", "0.05"]


@pytest.mark.slow
def test_zero3_training_with_checkpointing_matches_training_without(tiny_model_dir, tmp_path):
    # one rank each, in the test process: ZeRO-3 partitions and re-gathers every parameter on one rank too, which is
    # what the recomputation in backward meets (the 2-rank ZeRO-3 launches are test_lora's and test_train_deepspeed's)
    rows, finals = [], []
    for flag in ([], ["--gradient_checkpointing"]):
        out = str(tmp_path / ("ckpt" if flag else "plain"))
        proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *TINY_RUN, *flag])
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows.append(read_metrics(os.path.join(out, "metrics.jsonl")))
        finals.append(tiny(os.path.join(out, "final")).state_dict())
    for plain, ckpt in zip(*rows):
        for key in ("actor/loss", "actor/grad_norm", "actor/kl", "reward/mean"):
            assert ckpt[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), (plain["step"], key)
    for k in finals[0]:
        assert torch.allclose(finals[0][k], finals[1][k], atol=1e-5), k
