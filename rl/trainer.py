"""The training loop, in the order of README.md's "How one step flows": rollout, score, advantages, loss, step, log."""
import logging
import math
import os
import random
import signal
import time
from datetime import timedelta

import numpy as np
import torch
from tqdm import tqdm

from rl import dist
from rl.advantages import AdvantageInputs, compute_advantages
from rl.advantages.registry import build_step_hooks
from rl.checkpoint import checkpoint_root, export_hf, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rl.data import PromptStream, training_rows
from rl.completions import completion_records
from rl.engine import build_actor, build_reference, set_cpu_threads
from rl.env_metrics import env_metrics
from rl.loss import policy_loss
from rl.metrics import MetricsLogger
from rl.models import load_tokenizer
from rl.episodes import run_episodes
from rl.refinement_metrics import refinement_metrics
from rl.batching import batched_response_logprobs, micro_batches
from rl.rollout import make_rollout_backend, response_logprobs
from rl.rollout_vllm import SamplerMismatch
from rl.errors import RewardFailure, TrainingAborted
from rl.scoring import Scorer
from rl.run_start import parser_defaults, start_run
import rl.maestro  # noqa: F401  (registers MAESTRO's step hooks)

logger = logging.getLogger(__name__)
# Fault injection for the tests of the non-finite-step guard: a comma list of steps whose loss is made NaN.
FAULT_NAN_LOSS_STEPS_ENV = "CREDO_FAULT_NAN_LOSS_STEPS"


def _default_single_process_env():
    """`python train.py` without a launcher: a one-rank process group on localhost."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


class Trainer:
    def __init__(self, args):
        self.args = args
        set_cpu_threads()
        _default_single_process_env()
        dist.init_distributed(timeout=timedelta(minutes=args.dist_timeout_minutes))
        self.rank, self.world = dist.rank(), dist.world_size()
        random.seed(args.seed + self.rank)
        np.random.seed(args.seed + self.rank)
        torch.manual_seed(args.seed + self.rank)  # per-rank sampling streams

        self.tokenizer = load_tokenizer(args.model_name_or_path)
        self.data = PromptStream(training_rows(args), args.seed)
        self.scorer = Scorer(args)
        # --enable_test_mode stops the loop early (DeepSpeed-Chat); the LR schedule still spans --max_steps.
        self.steps = min(args.test_stop_step, args.max_steps) if args.enable_test_mode else args.max_steps
        # Claims OUTPUT_DIR (a lock) and decides fresh / resume / already finished, once every flag is checked.
        self.run = start_run(args, self.steps, parser_defaults())
        if self.run.finished:
            return
        self.actor = build_actor(args, self.world, args.max_steps)
        self.reference = build_reference(args, self.world)
        self.rollout_backend = make_rollout_backend(args, self.actor)  # None: the actor generates (--rollout_backend)
        self.scorer.attach_policy(self.actor, self.tokenizer)  # --reward_funcs ppl / ent / fmt / len / pref
        self.hooks = build_step_hooks(args.algo, self)  # a method's extra work around the advantages, and its state
        self.step = 0
        self.counters = {"bad_steps_total": 0, "bad_steps_in_row": 0}
        self.stop_signal = None
        self._resume()
        self.metrics = MetricsLogger(args.output_dir, enabled=self.rank == 0, start_step=self.step,
                                     tensorboard_path=args.tensorboard_path if args.enable_tensorboard else None)

    def _resume(self):
        if self.run.resume is None:
            return
        root, tag = self.run.resume.root, self.run.resume.tag
        state = load_checkpoint(self.actor, root, tag)
        self.step = state["step"]
        self.data.load_state_dict(state["data"])
        self.counters.update(state["counters"])
        self.scorer.load_state_dict(state["scorer"])
        self.hooks.load_state_dict(state.get("method", {}))
        if self.rank == 0:
            print(f"resumed from {os.path.join(root, tag)} at step {self.step}", flush=True)

    def _restore_step_start(self, state: dict, rng: dict):
        self.data.load_state_dict(state["data"])
        self.counters.update(state["counters"])
        self.scorer.load_state_dict(state["scorer"])
        self.hooks.load_state_dict(state["method"])
        set_rng_state(rng)

    # --- one step -------------------------------------------------------------------------------------------
    def rollout(self, timings):
        a = self.args
        rows, ids = self.data.next_batch(a.per_device_generation_batch_size * self.world, self.rank,
                                         a.per_device_generation_batch_size)
        g = a.num_generations
        samples = [row for row in rows for _ in range(g)]
        envs = [self.scorer.new_env() for _ in samples]
        return run_episodes(self.actor, self.tokenizer, envs, samples, torch.tensor(ids).repeat_interleave(g),
                            self.scorer.safe_step, a, timings)

    def score(self, batch, timings):
        t0 = time.perf_counter()
        batch = self.scorer.score(batch, self.step + 1)
        timings["reward"] = timings.get("reward", 0.0) + time.perf_counter() - t0
        self.scorer.check_failures(self.step + 1)
        return batch

    def advantages(self, batch, timings):
        """Batch-global advantages: every rank's scores are gathered, so group and batch statistics are exact
        whatever the placement of groups on ranks; each rank keeps its own slice."""
        lengths = batch.response_mask.sum(-1)
        inputs = AdvantageInputs(scores=dist.all_gather_cat(batch.scores), group_ids=dist.all_gather_cat(batch.group_ids),
                                 lengths=dist.all_gather_cat(lengths),
                                 components={k: dist.all_gather_cat(v) for k, v in batch.components.items()},
                                 correctness=dist.all_gather_cat(batch.correctness),
                                 turn_scores=dist.all_gather_cat(batch.turn_scores),
                                 counterfactual=None if batch.counterfactual is None
                                 else dist.all_gather_cat(batch.counterfactual),
                                 actions=None if batch.actions is None else dist.all_gather_cat(batch.actions))
        adv, method_metrics = compute_advantages(self.args.algo, inputs, self.args)
        method_metrics.update(self.hooks.after_advantages(inputs, adv, timings))
        n = len(batch)
        batch.advantages = adv[self.rank * n:(self.rank + 1) * n].to(self.actor.device)
        return batch, inputs, method_metrics

    def train_on(self, batch, timings):
        a = self.args
        if self.rollout_backend is not None:
            self.rollout_backend.sleep()  # vLLM gives its GPU memory back while the actor trains
        t0 = time.perf_counter()
        n, micro = len(batch), a.per_device_train_micro_batch_size
        accumulation = n // micro
        global_tokens = float(dist.all_reduce(batch.response_mask.sum()).item())
        # DeepSpeed divides by the accumulation steps and averages over ranks: undo both so that the step's
        # gradient is that of the loss over the whole global batch (verl's global-batch aggregation).
        agg = {"num_tokens": global_tokens / (self.world * accumulation), "num_seqs": micro,
               "norm_len": a.max_answer_seq_len}
        if self.reference is not None and batch.ref_logp is None:  # MAESTRO's --maestro_kl_in_reward may have them
            batch.ref_logp = self._no_grad_logprobs(self.reference, batch, micro)
        if a.ppo_epochs > 1:  # with one pass the rollout policy is the current one: no extra forward needed
            batch.old_logp = self._no_grad_logprobs(self.actor, batch, micro)
        sums = {k: 0.0 for k in ("clipfrac", "clipfrac_lower", "approx_kl", "kl", "entropy", "pg_loss", "loss")}
        mismatch = SamplerMismatch(a.vllm_is_correction, a.vllm_is_cap)  # vLLM vs trainer log-probs (+ TIS)
        nonfinite_loss = self._stage0_skipped = False
        self._stage0_grad_norm = None
        inject_nan = str(self.step + 1) in os.environ.get(FAULT_NAN_LOSS_STEPS_ENV, "").split(",")
        self.actor.train()
        for _ in range(a.ppo_epochs):
            for part in (mb.of(batch) for mb in micro_batches(batch.attention_mask, batch.prompt_len, micro)):
                mask = part.response_mask
                logp, entropy = response_logprobs(self.actor, part.input_ids, part.attention_mask, part.prompt_len,
                                                  a.temperature, with_entropy=True)
                old = part.old_logp if part.old_logp is not None else logp.detach()
                is_w = mismatch.weights(old, part.rollout_logp, mask)
                loss, stats = policy_loss(logp, old, part.advantages, mask,
                                          a.clip_ratio_low, a.clip_ratio_high, a.clip_ratio_c, a.loss_agg_mode,
                                          ref_logp=part.ref_logp, beta=a.beta, kl_type=a.kl_type, is_weights=is_w,
                                          **agg)
                if inject_nan:
                    loss = loss * float("nan")
                nonfinite_loss |= not bool(torch.isfinite(loss.detach()))
                self.actor.backward(loss)
                if self.actor.is_gradient_accumulation_boundary():
                    self._guard_stage0_gradients()
                # ZeRO 1-3 skip an optimizer step whose gradient norm is not finite (DeepSpeed's overflow check).
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
        out.update(mismatch.metrics())
        grad_norm = self.actor.get_global_grad_norm()
        if grad_norm is None:  # DeepSpeed does not report it without ZeRO in fp32: the stage-0 guard measured it
            grad_norm = self._stage0_grad_norm
        grad_norm = float(grad_norm) if grad_norm is not None else float("nan")
        out["actor/grad_norm"] = grad_norm
        out["actor/lr"] = float(self.actor.get_lr()[0])
        bad = nonfinite_loss or self._stage0_skipped or not math.isfinite(grad_norm)
        bad = dist.all_reduce(torch.tensor([float(bad)]), op="max").item() > 0
        self._count_bad_step(bad)
        out["train/skipped_step"] = float(bad)
        out["train/skipped_steps_total"] = float(self.counters["bad_steps_total"])
        return out

    def _guard_stage0_gradients(self):
        """Without ZeRO, DeepSpeed applies any gradient: zero non-finite ones and step with lr 0 (a no-op)."""
        if self.args.actor_zero_stage != 0:
            return
        # the global gradient norm (gradients are already averaged over ranks here), before clipping
        norms = [p.grad.detach().float().norm() for p in self.actor.module.parameters() if p.grad is not None]
        self._stage0_grad_norm = float(torch.stack(norms).norm()) if norms else 0.0
        finite = math.isfinite(self._stage0_grad_norm)
        if dist.all_reduce(torch.tensor([0.0 if finite else 1.0]), op="max").item() == 0:
            return
        for p in self.actor.module.parameters():
            if p.grad is not None:
                p.grad.zero_()
        for group in self.actor.optimizer.param_groups:
            group["lr"] = 0.0  # the scheduler sets it again on its next step
        self._stage0_skipped = True

    def _count_bad_step(self, bad: bool):
        if not bad:
            self.counters["bad_steps_in_row"] = 0
            return
        self.counters["bad_steps_total"] += 1
        self.counters["bad_steps_in_row"] += 1
        logger.warning("step %d: non-finite loss or gradients; the update was skipped (%d in a row)",
                       self.step + 1, self.counters["bad_steps_in_row"])
        if self.counters["bad_steps_in_row"] >= self.args.max_bad_steps:
            raise TrainingAborted(
                f"{self.counters['bad_steps_in_row']} consecutive steps had non-finite loss or gradients "
                f"(--max_bad_steps {self.args.max_bad_steps}); stopping. The last good checkpoint in "
                f"{checkpoint_root(self.args.output_dir)} is untouched.")

    @staticmethod
    def _global_mean_std(x: torch.Tensor):
        gathered = dist.all_gather_cat(x.detach().float().cpu())
        return gathered.mean().item(), gathered.std().item() if len(gathered) > 1 else 0.0

    def _no_grad_logprobs(self, engine, batch, micro):
        return batched_response_logprobs(engine, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                         self.args.temperature, micro)

    def train_step(self) -> dict:
        timings = {}
        t0 = time.perf_counter()
        batch = self.rollout(timings)
        batch = self.score(batch, timings)
        hook_metrics = self.hooks.after_score(batch, timings)
        batch, inputs, method_metrics = self.advantages(batch, timings)
        method_metrics.update(hook_metrics)
        metrics = self.scorer.metrics(inputs)
        if inputs.turn_scores.shape[1] > 1:  # preservation/regression rates, best- and final-turn success
            metrics.update(refinement_metrics(inputs.turn_scores))
        metrics["response_length/mean"] = inputs.lengths.float().mean().item()
        metrics["response_length/max"] = inputs.lengths.max().item()
        metrics.update(method_metrics)
        metrics["advantage/mean"], metrics["advantage/std"] = self._global_mean_std(batch.advantages)
        metrics.update(env_metrics(batch.env_values))  # env/<component>/mean, env/info/<key>/mean
        self.completion_samples = completion_records(batch, self.args.log_completions) if self.rank == 0 else []
        metrics.update(self.train_on(batch, timings))
        timings["step"] = time.perf_counter() - t0
        slowest = dist.all_reduce(torch.tensor([timings[k] for k in sorted(timings)], dtype=torch.float64), op="max")
        for i, k in enumerate(sorted(timings)):
            metrics[f"time/{k}"] = slowest[i].item()
        for k in timings:  # e.g. time_share/counterfactual (TCPO), time_share/conductor (MAESTRO)
            if k != "step":
                metrics[f"time_share/{k}"] = metrics[f"time/{k}"] / max(metrics["time/step"], 1e-9)
        generated = inputs.lengths.sum().item()
        metrics["throughput/generated_tokens_per_s"] = generated / max(metrics["time/generate"], 1e-9)
        metrics["throughput/tokens_per_s"] = generated / max(metrics["time/step"], 1e-9)
        return metrics

    # --- the loop -------------------------------------------------------------------------------------------
    def trainer_state(self) -> dict:
        """Everything besides the engine that carries across steps (restored exactly by --resume)."""
        return {"step": self.step, "data": self.data.state_dict(), "counters": dict(self.counters),
                "scorer": self.scorer.state_dict(), "method": self.hooks.state_dict()}

    def save(self):
        save_checkpoint(self.actor, self.args.output_dir, self.step, self.trainer_state(), self.args.save_total_limit,
                        flags=self.run.flags)

    def _on_signal(self, signum, frame):
        self.stop_signal = signal.Signals(signum).name
        if self.rank == 0:
            # after the last step there is no step to finish: only the final save / export, then the exit
            doing = f"finishing step {self.step + 1}, then saving" if self.step < self.steps else \
                f"the last step ({self.step}) is done; finishing the final save"
            print(f"\n{self.stop_signal} received: {doing} and exiting", flush=True)

    def _stop_requested(self) -> bool:
        """All ranks stop together if any rank was signalled (a scheduler may signal them one by one)."""
        flag = torch.tensor([1.0 if self.stop_signal else 0.0])
        return dist.all_reduce(flag, op="max").item() > 0

    def fit(self):
        a = self.args
        if self.run.finished:
            if self.rank == 0:
                print(f"{a.output_dir} is finished: {self.run.resume.path} is at step {self.run.resume.step} of "
                      f"{self.steps}; nothing to train. Raise --max_steps to train it further, or pick another "
                      f"--output_dir for a new run", flush=True)
            self.scorer.close()
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        bar = tqdm(total=self.steps, initial=self.step, desc="train", disable=self.rank != 0, dynamic_ncols=True)
        while self.step < self.steps:
            step_start = (self.trainer_state(), rng_state())
            try:
                metrics = self.train_step()
            except RewardFailure:
                # Save the state from before this step (no update was made): resuming retries the same batch.
                self._restore_step_start(*step_start)
                self.save()
                raise
            self.step += 1
            self.metrics.log(self.step, metrics)
            self.metrics.log_completions(self.step, self.completion_samples)
            if self.rank == 0:
                bar.write(self.metrics.console_line(self.step, metrics))
            bar.update(1)
            if self._stop_requested():
                bar.close()
                self.save()
                if self.rank == 0:
                    print(f"stopped by {self.stop_signal or 'a signal on another rank'} after step {self.step}; "
                          f"checkpoint saved; continue with --output_dir {a.output_dir}", flush=True)
                return
            if a.save_steps and self.step % a.save_steps == 0 and self.step < self.steps:
                self.save()
            if a.save_model_only_steps and self.step % a.save_model_only_steps == 0 and self.step < self.steps:
                export_hf(self.actor, self.tokenizer, os.path.join(a.output_dir, "hf", f"step_{self.step}"))
        bar.close()
        self.save()
        if not a.no_final_export:
            export_hf(self.actor, self.tokenizer, os.path.join(a.output_dir, "final"))
        self.metrics.close()
        self.scorer.close()  # the reward workers; a hung reward cannot delay the exit (rewards/worker_pool.py)
        for sig, handler in previous.items():  # training is over: a signal now stops the process as usual
            signal.signal(sig, handler)
        if self.rank == 0:
            print(f"done: {self.step} steps; outputs in {a.output_dir}", flush=True)
