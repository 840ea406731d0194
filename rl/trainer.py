"""The training loop, in the order of README.md's "How one step flows": rollout, score, advantages, loss, step, log."""
import logging
import os
import random
import signal
import time
from datetime import timedelta

import numpy as np
import torch
from tqdm import tqdm

from rl.config import parser_defaults
from rl.engine import dist
from rl.methods import StepContext, build_method, method_class
from rl.run.checkpoint import checkpoint_root, export_hf, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rl.rollout.data import DataSettings, PromptStream, repeated_rows_warning, training_rows
from rl.rollout.dynamic_sampling import FilterGroupsExhausted, FilterSettings, collect_groups
from rl.engine.actor import EngineSettings, build_actor, build_reference, set_cpu_threads
from rl.update.length_shaping import LengthSettings, mask_truncated, overlong_metrics, punish_overlong
from rl.log.metrics import MetricsLogger
from rl.log.step_metrics import (UpdateRoofline, advantage_metrics, completion_records, env_metrics, flop_shape,
                                 response_metrics, timing_metrics, update_roofline_metrics)
from rl.engine.hardware import peak_flops
from rl.engine.models import load_tokenizer
from rl.rollout.episodes import EpisodeSettings, run_episodes
from rl.rollout.samplers import SamplerSettings, make_sampler
from rl.errors import RewardFailure
from rl.scoring import Scorer, ScoringSettings
from rl.run.preflight import preflight
from rl.run.saved_config import plain_flags
from rl.run.start import OutputSettings, StartSettings, start_run
from rl.run.launch_ranks import end_at_once, launched_rank, stop_announcement
from rl.update.step_guard import StepGuard
from rl.update.ppo import LossSettings, mini_batch_count, no_grad_logprobs, ppo_update, update_sampling_signals
from rl.update.ref_sync import ReferenceSync, RefSyncSettings
from rl.eval.validation import PeriodicValidation
from rl.run.best_checkpoint import BestCheckpoint

logger = logging.getLogger(__name__)


class Trainer:
    def __init__(self, args):
        self.args = args
        set_cpu_threads()
        dist.default_single_process_env()
        dist.init_distributed(timeout=timedelta(minutes=args.dist_timeout_minutes))
        self.rank, self.world = dist.rank(), dist.world_size()
        random.seed(args.seed + self.rank)
        np.random.seed(args.seed + self.rank)
        torch.manual_seed(args.seed + self.rank)  # per-rank sampling streams

        self.tokenizer = load_tokenizer(args.model_name_or_path)
        data = DataSettings.from_args(args)
        self.data = PromptStream(training_rows(data), data.seed)
        # every rank reachable, and on the same flags, model and data as rank 0 (rl/run/preflight.py)
        preflight(plain_flags(args), args.model_name_or_path, self.data.rows_sha256(),
                  timeout_s=min(120.0, args.dist_timeout_minutes * 60))
        repeated = repeated_rows_warning(len(self.data.rows), args.per_device_generation_batch_size * self.world,
                                         f"--data_path {args.data_path}" if args.data_path else f"--env {args.env}")
        if repeated and self.rank == 0:
            print(f"WARNING: {repeated}", flush=True)
        # every reward, computed once: --reward_funcs or the method's own (MAESTRO's)
        self.scorer = Scorer(ScoringSettings.from_args(args, method_class(args.algo).reward_names(args)))
        # --enable_test_mode stops the loop early (DeepSpeed-Chat); the LR schedule still spans --max_steps.
        self.steps = min(args.test_stop_step, args.max_steps) if args.enable_test_mode else args.max_steps
        # Claims OUTPUT_DIR (a lock) and decides fresh / resume / already finished, once every flag is checked.
        self.run = start_run(StartSettings.from_args(args), self.steps, parser_defaults())
        args.output_dir, args.tensorboard_path = self.run.output_dir, self.run.tensorboard_path  # as resolved there
        self.output = OutputSettings.from_args(args)  # where the run writes, the save cadence, the loggers
        if self.run.finished:
            return
        engine_settings = EngineSettings.from_args(args, mini_batch_count(
            args.per_device_generation_batch_size, self.world, args.num_generations, args.ppo_mini_batch_size))
        self.actor = build_actor(engine_settings, self.world, args.max_steps)
        self.reference = build_reference(engine_settings, self.world, self.actor)
        # perf/mfu/actor's denominator: the model's FLOP shape and this rank's measured matmul peak
        self.roofline = UpdateRoofline(*flop_shape(self.actor.module), peak_flops(
            next(self.actor.module.parameters()).dtype, self.actor.device))
        # who generates (rl/rollout/samplers.py): --rollout_backend, --decode_loop
        self.sampler = make_sampler(SamplerSettings.from_args(args), self.actor, self.tokenizer)
        self.scorer.attach_policy(self.actor, self.tokenizer)  # --reward_funcs ppl / ent / fmt / len / pref
        # the --algo method (rl/methods/): its advantages, its work around them, and the state it carries
        self.method = build_method(args.algo, args, StepContext(
            actor=self.actor, tokenizer=self.tokenizer, reference=self.reference, sampler=self.sampler,
            score_alternative=self.scorer.score_alternative, rank=self.rank, world=self.world))
        # what the sampling pass records so that TCPO's surprisal and `ent` need no forward (rl/rollout/sampling_signals.py)
        self.sampling_signals = (self.method.sampling_signals() | self.scorer.sampling_signals()
                                 | update_sampling_signals(LossSettings.from_args(args)))
        # The optional pieces are built only when their flag is on (None otherwise), so a default step never enters
        # them: the reference sync (--sync_ref_model), DAPO's overlong punishment and truncated-completion mask
        # (rl/update/length_shaping.py), and (last, below) the validation and the best checkpoint.
        ref_sync = RefSyncSettings.from_args(args)
        self.ref_sync = (ReferenceSync(ref_sync, self.actor, self.reference)
                         if ref_sync.sync_ref_model and self.reference is not None else None)
        lengths = LengthSettings.from_args(args)
        self.lengths = lengths if lengths.active else None
        # DAPO's dynamic sampling rounds (rl/rollout/dynamic_sampling.py)
        self.filter = FilterSettings.from_args(args, per_component=method_class(args.algo).min_rewards > 1)
        self.episodes = EpisodeSettings.from_args(args)
        self.step = 0
        self.guard = StepGuard(args.max_bad_steps, args.actor_zero_stage, checkpoint_root(self.output.output_dir))
        self.stop_signal = None
        self._resume()
        self.metrics = MetricsLogger(self.output.output_dir, enabled=self.rank == 0, start_step=self.step,
                                     tensorboard_path=self.output.tensorboard_path, report_to=self.output.report_to,
                                     wandb=self.output.wandb)  # --report_to: rank 0 only
        # after each step when on (None otherwise): --eval_steps's validation and --save_best_metric's best export
        self.validation = (PeriodicValidation.from_args(args, self.actor, self.tokenizer, self.steps)
                           if args.eval_steps else None)
        self.best = (BestCheckpoint(args.save_best_metric, self.output.output_dir, resumed=self.run.resume is not None)
                     if args.save_best_metric else None)

    def _resume(self):
        if self.run.resume is None:
            return
        root, tag = self.run.resume.root, self.run.resume.tag
        state = load_checkpoint(self.actor, root, tag)
        self.step = state["step"]
        self.data.load_state_dict(state["data"])
        self.counters.update(state["counters"])
        self.scorer.load_state_dict(state["scorer"])
        self.method.load_state_dict(state.get("method", {}))
        if self.ref_sync:
            self.ref_sync.load_state_dict(state.get("reference", {}))
        if self.rank == 0:
            print(f"resumed from {os.path.join(root, tag)} at step {self.step}", flush=True)

    def _restore_step_start(self, state: dict, rng: dict):
        self.data.load_state_dict(state["data"])
        self.counters.update(state["counters"])
        self.scorer.load_state_dict(state["scorer"])
        self.method.load_state_dict(state["method"])
        set_rng_state(rng)

    # --- one step -------------------------------------------------------------------------------------------
    def rollout(self, timings):
        a = self.args
        rows, ids = self.data.next_batch(a.per_device_generation_batch_size * self.world, self.rank,
                                         a.per_device_generation_batch_size)
        g = a.num_generations
        samples = [row for row in rows for _ in range(g)]
        envs = [self.scorer.new_env() for _ in samples]
        return run_episodes(self.sampler, self.tokenizer, envs, samples, torch.tensor(ids).repeat_interleave(g),
                            self.scorer.safe_step, self.episodes, timings, signals=self.sampling_signals)

    def score(self, batch, timings):
        t0 = time.perf_counter()
        batch = self.scorer.score(batch, self.step + 1, scalarize=self.method.scalarize, timings=timings)
        timings["reward"] = timings.get("reward", 0.0) + time.perf_counter() - t0
        self.scorer.check_failures(self.step + 1)
        return punish_overlong(batch, self.lengths) if self.lengths else batch  # --overlong_buffer_len

    def scored_rollout(self, timings):
        """One round of prompts, rolled out and scored; with --filter_groups, rounds until every rank's groups
        all have spread (rl/rollout/dynamic_sampling.py)."""
        if not self.filter.filter_groups:
            return self.score(self.rollout(timings), timings), {}
        return collect_groups(lambda: self.score(self.rollout(timings), timings), self.filter,
                              self.args.per_device_generation_batch_size, self.tokenizer.pad_token_id)

    def advantages(self, batch, timings):
        """Batch-global advantages: every rank's scores are gathered, so group and batch statistics are exact
        whatever the placement of groups on ranks; each rank keeps its own slice."""
        inputs = batch.gather()
        adv, method_metrics = self.method.advantages(inputs)
        if self.method.after_advantages:  # MAESTRO's Conductor update
            method_metrics.update(self.method.after_advantages(inputs, adv, timings))
        n = len(batch)
        batch.advantages = adv[self.rank * n:(self.rank + 1) * n].to(self.actor.device)
        return batch, inputs, method_metrics

    def train_on(self, batch, timings):
        """The loss's no-grad log-probs, then the PPO update under the step guard (rl/update/ppo.py, rl/update/step_guard.py)."""
        self.sampler.sleep()  # vLLM gives its GPU memory back while the actor trains (a no-op for the others)
        t0 = time.perf_counter()
        settings = LossSettings.from_args(self.args)
        no_grad_logprobs(self.actor, self.reference, batch, settings)
        self.guard.start_step()
        tally = ppo_update(self.actor, batch, settings, self.guard)
        timings["train"] = time.perf_counter() - t0
        out = tally.metrics(with_kl=self.reference is not None)
        out.update(update_roofline_metrics(self.roofline, tally))  # perf/mfu/actor
        out["actor/grad_norm"] = self.guard.grad_norm(self.actor.get_global_grad_norm())
        out["actor/lr"] = float(self.actor.get_lr()[0])
        out.update(self.guard.end_step(self.step + 1, out["actor/grad_norm"]))
        return out

    @property
    def counters(self) -> dict:
        """The step guard's bad-step counters, checkpointed under "counters"."""
        return self.guard.counters

    def train_step(self) -> dict:
        """One step, stages 1-6 of README's "How one step flows"; returns its metrics (rl/log/step_metrics.py)."""
        timings, t0 = {}, time.perf_counter()
        batch, hook_metrics = self.scored_rollout(timings)
        if self.method.after_score:  # TCPO's counterfactuals, MAESTRO's scalarisation metrics
            hook_metrics.update(self.method.after_score(batch, timings))
        batch, inputs, method_metrics = self.advantages(batch, timings)
        method_metrics.update(hook_metrics)
        metrics = self.scorer.metrics(inputs)  # reward/*, success_rate
        metrics.update(response_metrics(batch, inputs, self.sampler.eos_ids))
        metrics.update(method_metrics)
        if self.lengths:
            metrics.update(overlong_metrics(inputs, self.lengths))
        metrics.update(advantage_metrics(batch.advantages))
        metrics.update(env_metrics(batch.env_values))  # env/<component>/mean, env/info/<key>/mean
        self.completion_samples = completion_records(batch, self.args.log_completions) if self.rank == 0 else []
        if self.lengths:
            batch = mask_truncated(batch, self.lengths, self.sampler.eos_ids)
        metrics.update(self.train_on(batch, timings))
        if self.ref_sync:
            metrics.update(self.ref_sync.after_step(self.step + 1))  # the reference moves to the policy
        timings["step"] = time.perf_counter() - t0
        metrics.update(timing_metrics(timings, inputs.lengths.sum().item()))
        return metrics

    def log_step(self, metrics: dict):
        """Stage 7 of the step just trained (self.step): the validation and best checkpoint when on, then the metrics
        and a few completions to the --report_to loggers (rl/log/metrics.py)."""
        if self.validation:
            metrics.update(self.validation.after_step(self.step))
        if self.best:
            metrics.update(self.best.consider(self.step, metrics, self.actor, self.tokenizer))
        self.metrics.log(self.step, metrics)
        self.metrics.log_completions(self.step, self.completion_samples)

    # --- the loop -------------------------------------------------------------------------------------------
    def trainer_state(self) -> dict:
        """Everything besides the engine that carries across steps (restored exactly by --resume)."""
        return {"step": self.step, "data": self.data.state_dict(), "counters": dict(self.counters),
                "scorer": self.scorer.state_dict(), "method": self.method.state_dict()}

    def save(self) -> bool:
        """A full checkpoint of the current state, unless --save_strategy final / no keeps none. True when saved."""
        if not self.output.checkpoints:
            return False
        state = self.trainer_state()
        if self.ref_sync:  # the mixed reference is run state too (not in trainer_state: it runs every step)
            state["reference"] = self.ref_sync.state_dict()
        save_checkpoint(self.actor, self.output.output_dir, self.step, state, self.output.save_total_limit,
                        flags=self.run.flags)
        return True

    def _on_signal(self, signum, frame):
        """The first signal stops after this step; a second one ends a bare `python train.py` at once (a launcher
        owns the second signal of its ranks: rl/run/launch_ranks.py)."""
        again, bare = self.stop_signal is not None, not launched_rank()
        self.stop_signal = signal.Signals(signum).name
        if again and bare:
            end_at_once(signum, self.step, self.output.checkpoints)
        if self.rank == 0 and not again:
            print(stop_announcement(self.stop_signal, self.step, self.steps, self.output.checkpoints,
                                    self.output.final_export, self.output.output_dir, bare), flush=True)

    def _stop_requested(self) -> bool:
        """All ranks stop together if any rank was signalled (a scheduler may signal them one by one)."""
        flag = torch.tensor([1.0 if self.stop_signal else 0.0])
        return dist.all_reduce(flag, op="max").item() > 0

    def fit(self):
        out = self.output
        if self.run.finished:
            if self.rank == 0:
                print(f"{out.output_dir} is finished: {self.run.resume.path} is at step {self.run.resume.step} of "
                      f"{self.steps}; nothing to train. Raise --max_steps to train it further, or pick another "
                      f"--output_dir for a new run", flush=True)
            self.scorer.close()
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        initial = self.validation.before_train(self.step) if self.validation else {}  # --eval_before_train: step 0
        if initial:
            if self.best:
                initial.update(self.best.consider(0, initial, self.actor, self.tokenizer))
            self.metrics.log(0, initial)
        bar = tqdm(total=self.steps, initial=self.step, desc="train", disable=self.rank != 0, dynamic_ncols=True)
        while self.step < self.steps:
            step_start = (self.trainer_state(), rng_state())
            try:
                metrics = self.train_step()
            except (RewardFailure, FilterGroupsExhausted):
                # Save the state from before this step (no update was made): resuming retries the same batch. Before
                # the first step of a fresh run that state is the start itself, which a rerun rebuilds for free: a
                # failed start leaves no 1.6 GB checkpoint behind.
                self._restore_step_start(*step_start)
                if self.step > 0 or self.run.resume is not None:
                    self.save()
                raise
            self.step += 1
            self.log_step(metrics)
            if self.rank == 0:
                bar.write(self.metrics.console_line(self.step, metrics))
            bar.update(1)
            if self._stop_requested():
                bar.close()
                saved = self.save()
                if self.rank == 0:
                    print(f"stopped by {self.stop_signal or 'a signal on another rank'} after step {self.step}; "
                          + (f"checkpoint saved; continue with --output_dir {out.output_dir}" if saved else
                             "nothing saved (--save_strategy keeps no checkpoints)"), flush=True)
                return
            if out.save_steps and self.step % out.save_steps == 0 and self.step < self.steps:
                self.save()
            if out.save_model_only_steps and self.step % out.save_model_only_steps == 0 and self.step < self.steps:
                export_hf(self.actor, self.tokenizer, os.path.join(out.output_dir, "hf", f"step_{self.step}"))
        bar.close()
        self.save()
        if out.final_export:
            export_hf(self.actor, self.tokenizer, os.path.join(out.output_dir, "final"))
        self.metrics.close()
        self.scorer.close()  # the reward workers; a hung reward cannot delay the exit (rewards/worker_pool.py)
        for sig, handler in previous.items():  # training is over: a signal now stops the process as usual
            signal.signal(sig, handler)
        if self.rank == 0:
            print(f"done: {self.step} steps; outputs in {out.output_dir}", flush=True)
