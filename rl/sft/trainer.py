"""Supervised fine-tuning on the RL actor's engine (DeepSpeed-Chat's step 1): batch -> token NLL on the assistant
tokens -> ZeRO step -> log, with RL's run folder, checkpoints (exact resume), loggers, step guard and HF export.

One step: each rank takes its slice of a global batch of examples (per_device_train_batch_size x
gradient_accumulation_steps per rank), runs its micro-batches forward and backward, and DeepSpeed steps once. The
loss is the mean NLL over every trained token of the global batch (each micro-batch's sum divided by the step's
token count over all ranks, undoing DeepSpeed's division by the accumulation and the ranks), so the step does not
depend on how its examples fall into micro-batches or ranks (TRL's `average_tokens_across_devices`).
"""
import math
import os
import random
import signal
import time
from datetime import timedelta

import numpy as np
import torch
from tqdm import tqdm

from envs import env_class
from rl.engine import dist
from rl.engine.actor import EngineSettings, build_actor, set_cpu_threads
from rl.engine.lora import LoraSettings
from rl.engine.models import load_tokenizer
from rl.log.metrics import MetricsLogger
from rl.rollout.data import PromptStream
from rl.rollout.tokens import eos_ids
from rl.run.checkpoint import checkpoint_root, export_hf, load_checkpoint, save_checkpoint
from rl.run.preflight import preflight
from rl.run.saved_config import plain_flags
from rl.run.start import OutputSettings, StartSettings, start_run
from rl.sft.config import parser_defaults
from rl.sft.data import SFTDataSettings, make_examples, source_rows
from rl.sft.evaluation import HeldOutEval, HeldOutSettings
from rl.sft.loss import collate, token_nll_sum, trained_targets
from rl.update.step_guard import StepGuard


class SFTTrainer:
    def __init__(self, args):
        self.args = args
        set_cpu_threads()
        dist.default_single_process_env()
        dist.init_distributed(timeout=timedelta(minutes=args.dist_timeout_minutes))
        self.rank, self.world = dist.rank(), dist.world_size()
        random.seed(args.seed + self.rank)
        np.random.seed(args.seed + self.rank)
        torch.manual_seed(args.seed)

        self.tokenizer = load_tokenizer(args.model_name_or_path)
        env_cls = env_class(args.env)
        self.env_settings = env_cls.settings_from_args(args)
        self.env = env_cls(prompt_key=args.prompt_key, answer_key=args.answer_key, **self.env_settings)
        self.data_settings = SFTDataSettings(
            data_path=args.data_path, data_split=args.data_split, env=args.env, env_settings=self.env_settings,
            num_train_samples=args.num_train_samples, max_seq_len=args.max_seq_len, packing=args.packing,
            skip_bad_rows=args.skip_bad_rows, seed=args.seed)
        from transformers import AutoConfig
        self.eos_ids = eos_ids(self.tokenizer, AutoConfig.from_pretrained(args.model_name_or_path))
        examples, self.data_stats = make_examples(source_rows(self.data_settings), self.tokenizer, self.eos_ids,
                                                  self.data_settings, self.env)
        self.data = PromptStream(examples, args.seed)
        preflight(plain_flags(args), args.model_name_or_path, self.data.rows_sha256(),  # rl/run/preflight.py
                  timeout_s=min(120.0, args.dist_timeout_minutes * 60))
        self.micro, self.accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
        self.global_batch = self.micro * self.accumulation * self.world
        self.steps = args.max_steps if args.max_steps > 0 else \
            max(1, math.ceil(args.num_train_epochs * len(examples) / self.global_batch))
        if self.rank == 0:
            print(f"sft: {self.data_stats} -> {self.steps} steps of {self.global_batch} "
                  f"{'packed rows' if args.packing else 'examples'}", flush=True)

        self.run = start_run(StartSettings.from_args(args), self.steps, parser_defaults())
        args.output_dir, args.tensorboard_path = self.run.output_dir, self.run.tensorboard_path  # as resolved there
        self.output = OutputSettings.from_args(args)
        if self.run.finished:
            return
        engine = EngineSettings(
            model_name_or_path=args.model_name_or_path, dtype=args.dtype, zero_stage=args.actor_zero_stage,
            offload=bool(args.offload), learning_rate=args.actor_learning_rate, weight_decay=args.actor_weight_decay,
            lr_scheduler_type=args.lr_scheduler_type, num_warmup_steps=args.num_warmup_steps, ppo_epochs=1,
            gradient_clipping=args.gradient_clipping, micro=self.micro,
            responses_per_rank=self.micro * self.accumulation, gradient_checkpointing=bool(args.gradient_checkpointing),
            lora=LoraSettings.from_args(args), hybrid_engine=False, max_out_tokens=args.max_seq_len,
            uses_reference=False)
        self.actor = build_actor(engine, self.world, self.steps)
        self.guard = StepGuard(args.max_bad_steps, args.actor_zero_stage, checkpoint_root(self.output.output_dir))
        self.evaluation = HeldOutEval.build(HeldOutSettings.from_args(args), self.env, self.data_settings, self.actor,
                                            self.tokenizer, self.eos_ids)
        self.step, self.stop_signal = 0, None
        if self.run.resume is not None:
            state = load_checkpoint(self.actor, self.run.resume.root, self.run.resume.tag)
            self.step = state["step"]
            self.data.load_state_dict(state["data"])
            self.guard.counters.update(state["counters"])
            if self.rank == 0:
                print(f"resumed from {self.run.resume.path} at step {self.step}", flush=True)
        self.metrics = MetricsLogger(self.output.output_dir, enabled=self.rank == 0, start_step=self.step,
                                     tensorboard_path=self.output.tensorboard_path, report_to=self.output.report_to,
                                     wandb=self.output.wandb)

    def train_step(self) -> dict:
        t0 = time.perf_counter()
        rows, _ = self.data.next_batch(self.global_batch, self.rank, self.micro * self.accumulation)
        micro_batches = [collate(rows[i:i + self.micro], self.tokenizer.pad_token_id)
                         for i in range(0, len(rows), self.micro)]
        own = torch.tensor([[trained_targets(mb).sum(), mb["input_ids"].numel()] for mb in micro_batches]).sum(0)
        trained_tokens, tokens = dist.all_reduce(own.double()).tolist()  # over every rank: the loss's denominator
        scale = self.world * self.accumulation / max(trained_tokens, 1.0)
        self.guard.start_step()
        self.actor.train()
        nll = torch.zeros((), dtype=torch.float64)
        for mb in micro_batches:
            nll_sum, _ = token_nll_sum(self.actor, {k: v.to(self.actor.device) for k, v in mb.items()})
            loss = nll_sum * scale
            self.guard.check_loss(loss)
            self.actor.backward(loss)
            if self.actor.is_gradient_accumulation_boundary():
                self.guard.before_optimizer_step(self.actor.module, self.actor.optimizer)
            self.actor.step()
            nll += float(nll_sum.detach())
        elapsed = time.perf_counter() - t0
        out = {"train/loss": dist.all_reduce(nll.unsqueeze(0)).item() / max(trained_tokens, 1.0),
               "train/trained_tokens": trained_tokens, "train/tokens": tokens,
               "train/epoch": self.data.position / len(self.data.rows)}
        out["actor/grad_norm"] = self.guard.grad_norm(self.actor.get_global_grad_norm())
        out["actor/lr"] = float(self.actor.get_lr()[0])
        out.update(self.guard.end_step(self.step + 1, out["actor/grad_norm"]))
        out["time/step"] = dist.all_reduce(torch.tensor([elapsed]), op="max").item()
        out["throughput/tokens_per_s"] = tokens / max(out["time/step"], 1e-9)
        return out

    def save(self) -> bool:
        if not self.output.checkpoints:
            return False
        state = {"step": self.step, "data": self.data.state_dict(), "counters": dict(self.guard.counters)}
        save_checkpoint(self.actor, self.output.output_dir, self.step, state, self.output.save_total_limit,
                        flags=self.run.flags)
        return True

    def _on_signal(self, signum, frame):
        if self.stop_signal is not None:  # a second signal: stop now (the last complete checkpoint stays intact)
            raise KeyboardInterrupt
        self.stop_signal = signal.Signals(signum).name
        if self.rank == 0:
            print(f"\n{self.stop_signal} received: finishing step {self.step + 1}, then "
                  + ("saving and exiting" if self.output.checkpoints else "exiting (--save_strategy keeps no "
                                                                          "checkpoint: nothing is saved)")
                  + "; a second signal stops at once", flush=True)

    def fit(self):
        out = self.output
        if self.run.finished:
            if self.rank == 0:
                print(f"{out.output_dir} is finished at step {self.run.resume.step}; raise --max_steps to train "
                      f"further, or pick another --output_dir", flush=True)
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        bar = tqdm(total=self.steps, initial=self.step, desc="sft", disable=self.rank != 0, dynamic_ncols=True)
        every = self.args.eval_steps
        while self.step < self.steps:
            metrics = self.train_step()
            self.step += 1
            if (every and self.step % every == 0) or self.step == self.steps:
                metrics.update(self.evaluation.run())
            self.metrics.log(self.step, metrics)
            if self.rank == 0:
                shown = {k: metrics[k] for k in ("train/loss", "eval/loss", "eval/pass@1", "time/step") if k in metrics}
                bar.write(f"step {self.step} | " + " | ".join(f"{k} {v:.4g}" for k, v in shown.items()))
            bar.update(1)
            if dist.all_reduce(torch.tensor([1.0 if self.stop_signal else 0.0]), op="max").item() > 0:
                bar.close()
                saved = self.save()
                if self.rank == 0:
                    print(f"stopped after step {self.step}: " + (f"checkpoint saved; continue with --output_dir "
                          f"{out.output_dir}" if saved else "nothing saved (--save_strategy)"), flush=True)
                self.metrics.close()
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if self.rank == 0:
            print(f"done: {self.step} steps; outputs in {out.output_dir}", flush=True)
