"""One training step from the same weights and the same rollout at every batch layout a process group can run: the
micro-batch size (1, 2, or a rank's whole batch: with and without gradient accumulation), ZeRO stage 0, 2 and 3,
--skip_zero_advantage_rows on and off, every --loss_agg_mode. tests/update/test_layout_invariance.py runs it in the
test process (1 rank) and once under the real launcher on 2 ranks, and compares every result with one reference.

    deepspeed --num_gpus 2 --module tests.update.layout_sweep MODEL_DIR OUT.pt

Each combination is the real update: the trainer's actor engine (rl/engine/actor.py's build_actor, AdamW, gradient
clipping 1.0, fp32), rl/update/ppo.py's ppo_update on this rank's share of one global rollout (rows split over ranks
in rank order, as the trainer's prompt stream does). An engine per (stage, micro-batch size) is built once and put
back to its starting weights and optimizer state (a DeepSpeed checkpoint taken right after it was built) before each
of its combinations. What is kept per combination: the gradient the optimizer step consumes (after DeepSpeed's
division by the accumulation steps and averaging over ranks, before clipping) and every parameter after the step.
"""
import gc
import os
import shutil
import sys
import tempfile

import torch
from deepspeed.utils import safe_get_full_grad
from transformers.integrations.deepspeed import unset_hf_deepspeed_config

from rl.engine import dist
from rl.engine.actor import EngineSettings, build_actor
from rl.engine.lora import LoraSettings
from rl.run.checkpoint import gathered_state_dict
from rl.types import Rollout
from rl.update.loss import LOSS_AGG_MODES
from rl.update.ppo import LossSettings, ppo_update
from rl.update.step_guard import StepGuard

GLOBAL_ROWS, PROMPT, RESPONSE = 4, 4, 6  # 2 prompts x 2 responses over all ranks; padded prompt and response widths
LR = 1e-2
STAGES = (0, 2, 3)


def global_rollout() -> Rollout:
    """A fixed rollout of GLOBAL_ROWS responses: left-padded prompts, responses of different lengths (token-mean's
    denominators differ between micro-batches), and a second group whose responses scored alike (advantage 0: what
    --skip_zero_advantage_rows leaves out; on 2 ranks the second rank holds only those rows). Advantages per
    response, as GRPO's."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 90, (GLOBAL_ROWS, PROMPT + RESPONSE), generator=gen)
    attention = torch.ones(GLOBAL_ROWS, PROMPT + RESPONSE, dtype=torch.long)
    attention[1, 0] = 0                                   # prompts of different lengths, left-padded
    attention[3, :2] = 0
    lengths = torch.tensor([2, 6, 5, 1])                  # responses of different lengths, right-padded
    response_mask = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).float()
    attention[:, PROMPT:] = response_mask.long()
    return Rollout(input_ids=ids, attention_mask=attention, response_mask=response_mask, prompt_len=PROMPT,
                   group_ids=torch.arange(GLOBAL_ROWS) // 2, completions=[""] * GLOBAL_ROWS,
                   samples=[{}] * GLOBAL_ROWS, turn_ids=torch.where(response_mask > 0, 0, -1),
                   advantages=torch.tensor([1.2, -0.7, 0.0, 0.0]))


def rank_share(batch: Rollout, rank: int, world: int) -> Rollout:
    """This rank's rows of the global rollout (consecutive, in rank order, as the trainer's ranks hold them)."""
    n = GLOBAL_ROWS // world
    rows = slice(rank * n, (rank + 1) * n)
    return Rollout(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows],
                   response_mask=batch.response_mask[rows], prompt_len=batch.prompt_len,
                   group_ids=batch.group_ids[rows], completions=batch.completions[rows], samples=batch.samples[rows],
                   turn_ids=batch.turn_ids[rows], advantages=batch.advantages[rows])


def combination(world: int, stage: int, micro: int, rows: int, skip: bool, agg: str) -> str:
    """The name a failing comparison prints: every setting of the layout."""
    accumulation = f"accumulation {rows // micro}" if micro < rows else "no accumulation"
    return (f"ranks={world} zero_stage={stage} micro_batch={micro} ({accumulation}) "
            f"skip_zero_advantage_rows={'on' if skip else 'off'} loss_agg_mode={agg}")


class GradientRecorder(StepGuard):
    """The step guard, also keeping the full gradient the optimizer is about to consume (all ranks assemble it: a
    collective under ZeRO 2 and 3, called at the same point on every rank)."""

    def __init__(self, stage: int):
        super().__init__(max_bad_steps=3, zero_stage=stage, checkpoint_dir="unused")
        self.grad = None

    def before_optimizer_step(self, module, optimizer):
        self.grad = torch.cat([safe_get_full_grad(p).detach().float().flatten().cpu() for p in module.parameters()])
        super().before_optimizer_step(module, optimizer)


def engine_settings(model_dir: str, stage: int, micro: int, rows: int) -> EngineSettings:
    return EngineSettings(model_name_or_path=model_dir, dtype="fp32", zero_stage=stage, offload=False,
                          learning_rate=LR, weight_decay=0.0, lr_scheduler_type="constant", num_warmup_steps=0,
                          ppo_epochs=1, gradient_clipping=1.0, micro=micro, responses_per_rank=rows,
                          gradient_checkpointing=False, lora=LoraSettings(r=0, alpha=16.0, dropout=0.0,
                                                                          target_modules="all-linear"),
                          hybrid_engine=False, max_out_tokens=64, uses_reference=False)


def loss_settings(micro: int, agg: str, skip: bool) -> LossSettings:
    return LossSettings(micro=micro, ppo_epochs=1, temperature=1.0, clip_ratio_low=0.2, clip_ratio_high=0.2,
                        clip_ratio_c=3.0, loss_agg_mode=agg, beta=0.0, kl_type="k3", norm_len=RESPONSE,
                        is_correction="none", is_cap=2.0, skip_zero_rows=skip)


def _flat(state: dict):
    """Every tensor of a gathered state dict in one Tensor[P] (name order); None off rank 0."""
    return torch.cat([state[k].float().flatten() for k in sorted(state)]) if state else None


def sweep(model_dir: str, stages=STAGES) -> dict:
    """{combination name: {"grad": Tensor[P], "params": Tensor[P], "loss": float}} for every layout this process
    group can run, and "start": Tensor[P], the weights before (filled on rank 0; every rank takes part)."""
    world, rank = dist.world_size(), dist.rank()
    rows = GLOBAL_ROWS // world
    batch = rank_share(global_rollout(), rank, world)
    results = {}
    start_dir = tempfile.mkdtemp(prefix="layout_sweep_") if rank == 0 else None
    start_dir = dist.all_gather_object(start_dir)[0]
    for stage in stages:
        for micro in sorted({1, 2, rows}):
            engine = build_actor(engine_settings(model_dir, stage, micro, rows), world, num_training_steps=1)
            tag = f"start_stage{stage}_micro{micro}"
            engine.save_checkpoint(start_dir, tag=tag, save_latest=False)
            if "start" not in results:
                results["start"] = _flat(gathered_state_dict(engine.module))
            for agg in LOSS_AGG_MODES:
                for skip in (False, True):
                    engine.load_checkpoint(start_dir, tag=tag, load_optimizer_states=True,
                                           load_lr_scheduler_states=True)
                    guard = GradientRecorder(stage)
                    guard.start_step()
                    tally = ppo_update(engine, batch, loss_settings(micro, agg, skip), guard)
                    loss = tally.metrics(with_kl=False)["actor/loss"]
                    params = _flat(gathered_state_dict(engine.module))
                    if rank == 0:
                        results[combination(world, stage, micro, rows, skip, agg)] = {
                            "grad": guard.grad, "loss": loss, "params": params}
            del engine
        if stage == 3:  # ZeRO-3's engines registered their config with transformers: the next stage is lower
            gc.collect()
            unset_hf_deepspeed_config()
    dist.barrier()
    if rank == 0:
        shutil.rmtree(start_dir, ignore_errors=True)
    return results


def main(argv=None):
    # the launcher adds --local_rank=N (the rank is read from the environment)
    model_dir, out = [a for a in (argv or sys.argv[1:]) if not a.startswith("--local_rank")][:2]
    torch.set_num_threads(1)
    dist.init_distributed()
    results = sweep(model_dir)
    if dist.rank() == 0:
        torch.save(results, out + ".tmp")
        os.replace(out + ".tmp", out)
    dist.barrier()


if __name__ == "__main__":
    main()
