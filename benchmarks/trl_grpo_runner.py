"""TRL's GRPOTrainer on credo's benchmark task, timed per step; run by benchmarks/bench_vs_trl.py in its own process.

Settings match credo's run: the same model, single-digit arith prompts through the same chat template, credo's
arith verifier as the only reward, 8 prompts x 4 completions per optimizer step, one update per generation batch
(per_device_train_batch_size 32, steps_per_generation 1, num_iterations 1, so TRL computes no old log-probs), at
most 48 new tokens at temperature 0.7, lr 1e-5 constant, beta 0 (no reference model), fp32 (or `--bf16 on`), CPU,
no eval, no saving.

Writes a JSON of per-step records: wall seconds from on_step_begin to on_step_end, mean completion length, and a
phase breakdown from wrappers around GRPOTrainer's own methods (generate, reward, rollout total, loss forward,
backward, optimizer step).
"""
import argparse
import json
import os
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_dataset(n: int, seed: int):
    from datasets import Dataset

    from benchmarks.bench_envs import single_digit_rows
    # The env's first message is the user turn credo sends; TRL applies the same chat template to it.
    return Dataset.from_list([{"prompt": [{"role": "user", "content": row["prompt"]}], "answer": row["answer"]}
                              for row in single_digit_rows(n, seed)])


def correctness(prompts, completions, answer, **unused):
    """credo's arith verifier on each completion's text (conversational completions are message lists)."""
    from rewards.arith import ArithVerifier
    verifier = ArithVerifier()
    return [verifier(None, c[-1]["content"] if isinstance(c, list) else c, {"answer": a})
            for c, a in zip(completions, answer)]


class PhaseClock:
    """Accumulates seconds per phase name within the current optimizer step."""

    def __init__(self):
        self.current = {}

    def wrap(self, obj, attr, phase):
        original = getattr(obj, attr)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.current[phase] = self.current.get(phase, 0.0) + time.perf_counter() - t0
        setattr(obj, attr, timed)

    def take(self):
        out, self.current = self.current, {}
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct"))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--prompts", type=int, default=8, help="prompts per optimizer step")
    p.add_argument("--num_generations", type=int, default=4)
    p.add_argument("--max_completion_length", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--learning_rate", type=float, default=1e-5)
    p.add_argument("--gradient_checkpointing", choices=("on", "off"), default="off",
                   help="GRPOConfig defaults to on; credo does not checkpoint, so off is the matched setting")
    p.add_argument("--bf16", choices=("on", "off"), default="off",
                   help="GRPOConfig's bf16 (mixed precision: autocast over fp32 weights), a TRL user's bf16 switch")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="JSON file for the per-step records")
    a = p.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rl.engine.models import load_tokenizer

    tokenizer = load_tokenizer(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    responses = a.prompts * a.num_generations
    workdir = tempfile.mkdtemp(prefix="trl_grpo_bench_")
    config = GRPOConfig(
        output_dir=workdir, max_steps=a.steps, per_device_train_batch_size=responses, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=1, num_generations=a.num_generations,
        max_completion_length=a.max_completion_length, temperature=a.temperature, top_p=1.0, top_k=0,
        learning_rate=a.learning_rate, lr_scheduler_type="constant", warmup_steps=0, adam_beta2=0.95,
        weight_decay=0.0, max_grad_norm=1.0, beta=0.0, bf16=a.bf16 == "on", fp16=False, use_cpu=True, use_vllm=False,
        gradient_checkpointing=a.gradient_checkpointing == "on", logging_steps=1, report_to=[], save_strategy="no",
        eval_strategy="no", seed=a.seed, dataloader_num_workers=0, disable_tqdm=True)
    clock = PhaseClock()
    records = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            clock.take()
            self.t0 = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kw):
            clock.current["optimizer_step"] = time.perf_counter() - self.t_opt

        def on_step_end(self, args, state, control, **kw):
            records.append({"step": state.global_step, "seconds": time.perf_counter() - self.t0,
                            "phases": clock.take()})

        def on_log(self, args, state, control, logs=None, **kw):
            if records and logs and "completions/mean_length" in logs:
                # logged values may arrive formatted as strings
                records[-1]["completions_mean_length"] = float(logs["completions/mean_length"])
                records[-1]["reward"] = float(logs["reward"]) if "reward" in logs else None

    trainer = GRPOTrainer(model=model, reward_funcs=[correctness], args=config,
                          train_dataset=build_dataset(20 * a.steps * a.prompts, a.seed), processing_class=tokenizer,
                          callbacks=[StepTimer()])
    # Phases, from GRPOTrainer's own methods: rollout = generate + reward + (old log-probs: none here) + advantages.
    clock.wrap(trainer, "_generate_and_score_completions", "rollout")
    clock.wrap(trainer, "_generate", "generate")
    clock.wrap(trainer, "_calculate_rewards", "reward")
    clock.wrap(trainer, "compute_loss", "loss_forward")
    clock.wrap(trainer.accelerator, "backward", "backward")
    t0 = time.time()
    trainer.train()
    versions = {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}
    result = {"runner": "trl", "records": records, "wall_s": time.time() - t0, "responses_per_step": responses,
              "versions": versions,
              "torch_threads": torch.get_num_threads(), "config": vars(a)}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"steps": len(records), "seconds": [round(r["seconds"], 2) for r in records]}))


if __name__ == "__main__":
    main()
