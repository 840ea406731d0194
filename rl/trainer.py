"""The training loop, in the order of DESIGN.md: rollout, score, advantages, loss, step, log."""
import logging
import os
import random
import time

import deepspeed
import numpy as np
import torch
from tqdm import tqdm

from envs import make_env
from rewards.base import RewardCaller
from rl import dist
from rl.advantages import AdvantageInputs, compute_advantages
from rl.advantages.stats import group_mean_std
from rl.checkpoint import export_hf, save_checkpoint
from rl.data import PromptStream, training_rows
from rl.engine import build_actor, build_reference, set_cpu_threads
from rl.loss import policy_loss
from rl.metrics import MetricsLogger
from rl.models import load_tokenizer
from rl.rollout import generate_rollout, response_logprobs

logger = logging.getLogger(__name__)
SUCCESS_THRESHOLD = 1.0 - 1e-6  # a response "succeeds" when its verifier score is full marks


class Trainer:
    def __init__(self, args):
        self.args = args
        set_cpu_threads()
        deepspeed.init_distributed()
        self.rank, self.world = dist.rank(), dist.world_size()
        random.seed(args.seed + self.rank)
        np.random.seed(args.seed + self.rank)
        torch.manual_seed(args.seed + self.rank)  # per-rank sampling streams

        self.tokenizer = load_tokenizer(args.model_name_or_path)
        self.data = PromptStream(training_rows(args), args.seed)
        self.env = make_env(args.env, prompt_key=args.prompt_key, answer_key=args.answer_key)
        self.reward = RewardCaller(self._score_with_env, name=f"env:{args.env}")
        self.steps = args.test_stop_step if args.enable_test_mode else args.max_steps
        self.actor = build_actor(args, self.world, self.steps)
        self.reference = build_reference(args, self.world)
        self.step = 0
        self.metrics = MetricsLogger(args.output_dir, enabled=self.rank == 0, fresh=self.step == 0,
                                     tensorboard_path=args.tensorboard_path if args.enable_tensorboard else None)

    def _score_with_env(self, prompt, completion, sample):
        self.env.reset(sample)
        result = self.env.step(completion)
        return {"score": result.score, **result.components}

    # --- one step -------------------------------------------------------------------------------------------
    def rollout(self, timings):
        a = self.args
        rows, ids = self.data.next_batch(a.per_device_generation_batch_size * self.world, self.rank,
                                         a.per_device_generation_batch_size)
        conversations = [self.env.reset(row) for row in rows]
        return generate_rollout(self.actor, self.tokenizer, conversations, rows, torch.tensor(ids), a, timings)

    def score(self, batch, timings):
        t0 = time.perf_counter()
        scores, components = [], {}
        for i, (completion, sample) in enumerate(zip(batch.completions, batch.samples)):
            value = self.reward(None, completion, sample)
            value = value if isinstance(value, dict) else {"score": value}  # a failed call scores a flat 0
            scores.append(value.get("score", 0.0))
            for name, v in value.items():
                if name != "score":
                    components.setdefault(name, [0.0] * len(batch))[i] = v
        batch.scores = torch.tensor(scores, dtype=torch.float32)
        batch.components = {k: torch.tensor(v, dtype=torch.float32) for k, v in components.items()}
        timings["reward"] = time.perf_counter() - t0
        return batch

    def advantages(self, batch):
        """Batch-global advantages: every rank's scores are gathered, so group and batch statistics are exact
        whatever the placement of groups on ranks; each rank keeps its own slice."""
        lengths = batch.response_mask.sum(-1)
        inputs = AdvantageInputs(scores=dist.all_gather_cat(batch.scores), group_ids=dist.all_gather_cat(batch.group_ids),
                                 lengths=dist.all_gather_cat(lengths),
                                 components={k: dist.all_gather_cat(v) for k, v in sorted(batch.components.items())})
        adv, method_metrics = compute_advantages(self.args.algo, inputs, self.args)
        n = len(batch)
        batch.advantages = adv[self.rank * n:(self.rank + 1) * n].to(self.actor.device)
        return batch, inputs, method_metrics

    def train_on(self, batch, timings):
        a = self.args
        t0 = time.perf_counter()
        n, micro = len(batch), a.per_device_train_micro_batch_size
        accumulation = n // micro
        global_tokens = float(dist.all_reduce(batch.response_mask.sum()).item())
        # DeepSpeed divides by the accumulation steps and averages over ranks: undo both so that the step's
        # gradient is that of the loss over the whole global batch (verl's global-batch aggregation).
        agg = {"num_tokens": global_tokens / (self.world * accumulation), "num_seqs": micro,
               "norm_len": a.max_answer_seq_len}
        if self.reference is not None:
            batch.ref_logp = self._no_grad_logprobs(self.reference, batch, micro)
        if a.ppo_epochs > 1:  # with one pass the rollout policy is the current one: no extra forward needed
            batch.old_logp = self._no_grad_logprobs(self.actor, batch, micro)
        sums = {k: 0.0 for k in ("clipfrac", "clipfrac_lower", "approx_kl", "kl", "entropy", "pg_loss", "loss")}
        self.actor.train()
        for _ in range(a.ppo_epochs):
            for start in range(0, n, micro):
                sl = slice(start, start + micro)
                mask = batch.response_mask[sl]
                logp, entropy = response_logprobs(self.actor, batch.input_ids[sl], batch.attention_mask[sl],
                                                  batch.prompt_len, a.temperature, with_entropy=True)
                old = batch.old_logp[sl] if batch.old_logp is not None else logp.detach()
                ref = batch.ref_logp[sl] if batch.ref_logp is not None else None
                loss, stats = policy_loss(logp, old, batch.advantages[sl, None].expand_as(logp), mask,
                                          a.clip_ratio_low, a.clip_ratio_high, a.clip_ratio_c, a.loss_agg_mode,
                                          ref_logp=ref, beta=a.beta, kl_type=a.kl_type, **agg)
                self.actor.backward(loss)
                self.actor.step()
                tokens = float(mask.sum())
                stats["entropy"] = (entropy * mask).sum() / max(tokens, 1.0)
                stats["loss"] = loss.detach()
                for k in sums:
                    if k in stats:
                        sums[k] += float(stats[k]) * (1.0 if k == "loss" else tokens)
        timings["train"] = time.perf_counter() - t0
        local_tokens = float(batch.response_mask.sum()) * a.ppo_epochs
        reduced = dist.all_reduce(torch.tensor([sums[k] for k in sums] + [local_tokens], dtype=torch.float64))
        out = {f"actor/{k}": reduced[i].item() / max(reduced[-1].item(), 1.0) for i, k in enumerate(sums) if k != "loss"}
        out["actor/loss"] = reduced[list(sums).index("loss")].item() / (self.world * accumulation * a.ppo_epochs)
        if self.reference is None:
            out.pop("actor/kl")
        grad_norm = self.actor.get_global_grad_norm()
        out["actor/grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
        out["actor/lr"] = float(self.actor.get_lr()[0])
        return out

    @torch.no_grad()
    def _no_grad_logprobs(self, engine, batch, micro):
        parts = [response_logprobs(engine, batch.input_ids[s:s + micro], batch.attention_mask[s:s + micro],
                                   batch.prompt_len, self.args.temperature)[0] for s in range(0, len(batch), micro)]
        return torch.cat(parts, dim=0)

    def rollout_metrics(self, batch, inputs, timings) -> dict:
        scores, gids, lengths = inputs.scores, inputs.group_ids, inputs.lengths
        _, group_std, _ = group_mean_std(scores.double(), gids)
        unique_gids, first = np.unique(gids.cpu().numpy(), return_index=True)
        m = {"reward/mean": scores.mean().item(), "reward/std": scores.std().item() if len(scores) > 1 else 0.0,
             "success_rate": (scores >= SUCCESS_THRESHOLD).float().mean().item(),
             "frac_zero_std_groups": (group_std[torch.as_tensor(first)] == 0).float().mean().item(),
             "response_length/mean": lengths.float().mean().item(), "response_length/max": lengths.max().item(),
             "advantage/mean": batch.advantages.mean().item()}
        for name, values in inputs.components.items():
            m[f"reward/{name}/mean"] = torch.nanmean(values).item()
        errors = dist.all_reduce(torch.tensor([self.reward.stats.failures], dtype=torch.float64))
        m["reward/errors_total"] = errors.item()
        return m

    def train_step(self) -> dict:
        timings = {}
        t0 = time.perf_counter()
        batch = self.rollout(timings)
        batch = self.score(batch, timings)
        batch, inputs, method_metrics = self.advantages(batch)
        metrics = self.rollout_metrics(batch, inputs, timings)
        metrics.update(method_metrics)
        metrics.update(self.train_on(batch, timings))
        timings["step"] = time.perf_counter() - t0
        slowest = dist.all_reduce(torch.tensor([timings[k] for k in sorted(timings)], dtype=torch.float64), op="max")
        for i, k in enumerate(sorted(timings)):
            metrics[f"time/{k}"] = slowest[i].item()
        generated = inputs.lengths.sum().item()
        metrics["throughput/generated_tokens_per_s"] = generated / max(metrics["time/generate"], 1e-9)
        metrics["throughput/tokens_per_s"] = generated / max(metrics["time/step"], 1e-9)
        return metrics

    # --- the loop -------------------------------------------------------------------------------------------
    def trainer_state(self) -> dict:
        return {"step": self.step, "data": self.data.state_dict()}

    def fit(self):
        a = self.args
        bar = tqdm(total=self.steps, initial=self.step, desc="train", disable=self.rank != 0, dynamic_ncols=True)
        while self.step < self.steps:
            metrics = self.train_step()
            self.step += 1
            self.metrics.log(self.step, metrics)
            if self.rank == 0:
                bar.write(self.metrics.console_line(self.step, metrics))
            bar.update(1)
            if a.save_steps and self.step % a.save_steps == 0 and self.step < self.steps:
                save_checkpoint(self.actor, a.output_dir, self.step, self.trainer_state())
        bar.close()
        save_checkpoint(self.actor, a.output_dir, self.step, self.trainer_state())
        if not a.no_final_export:
            export_hf(self.actor, self.tokenizer, os.path.join(a.output_dir, "final"))
        self.metrics.close()
        if self.rank == 0:
            print(f"done: {self.step} steps; outputs in {a.output_dir}", flush=True)
