"""TRL's GRPOTrainer on the main job's task under a wall-clock budget, saving the trained model for credo's eval.py;
run by benchmarks/main_job_vs_trl.py in its own process (issue #41 item 2).

The same recipe as `bash scripts/train.sh` at its defaults, in TRL's own terms: the same model and chat template,
the same prompts (credo's arith train split, `envs.arith.make_arith_split("train", ..., seed)`), credo's arith
verifier as the only reward, PROMPTS x NUM_GENERATIONS completions per optimizer step, one update per generation
batch (steps_per_generation 1, num_iterations 1), at most MAX_NEW_TOKENS new tokens at TEMPERATURE, the same
AdamW (lr, betas 0.9/0.95, no weight decay, constant schedule, grad-norm clip 1.0), PPO clip 0.2, beta 0, and
GRPOConfig's defaults elsewhere (group-scaled rewards, token-level loss). Training stops at the end of the first
step after `--time_budget_s` seconds (the budget is checked at each step's end, as credo's step count is), then the
model is saved as an HF folder.
"""
import argparse
import json
import os
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_dataset(n: int, seed: int):
    from datasets import Dataset

    from envs.arith import make_arith_split
    # The env's first message is the user turn credo sends; TRL applies the same chat template to it.
    return Dataset.from_list([{"prompt": [{"role": "user", "content": row["prompt"]}], "answer": row["answer"]}
                              for row in make_arith_split("train", n, seed)])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct"))
    p.add_argument("--time_budget_s", type=float, required=True, help="stop at the first step end after this")
    p.add_argument("--max_steps", type=int, default=10000, help="a cap far above what the budget allows")
    p.add_argument("--prompts", type=int, default=8, help="prompts per optimizer step")
    p.add_argument("--num_generations", type=int, default=4)
    p.add_argument("--max_completion_length", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--learning_rate", type=float, default=2e-5)
    p.add_argument("--bf16", choices=("on", "off"), default="off",
                   help="GRPOConfig's bf16 (autocast over fp32 weights); off where bf16 matmuls are slower")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output_dir", required=True, help="OUTPUT/final (HF folder) and OUTPUT/trl_run.json")
    a = p.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.trl_grpo_runner import correctness  # credo's arith verifier as a TRL reward function
    from rl.engine.models import load_tokenizer

    tokenizer = load_tokenizer(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    responses = a.prompts * a.num_generations
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_main_job_"), max_steps=a.max_steps,
        per_device_train_batch_size=responses, gradient_accumulation_steps=1, steps_per_generation=1,
        num_iterations=1, num_generations=a.num_generations, max_completion_length=a.max_completion_length,
        temperature=a.temperature, top_p=1.0, top_k=0, learning_rate=a.learning_rate, lr_scheduler_type="constant",
        warmup_steps=0, adam_beta1=0.9, adam_beta2=0.95, weight_decay=0.0, max_grad_norm=1.0, epsilon=0.2, beta=0.0,
        bf16=a.bf16 == "on", fp16=False, use_cpu=True, use_vllm=False, gradient_checkpointing=False, logging_steps=1,
        report_to=[], save_strategy="no", eval_strategy="no", seed=a.seed, dataloader_num_workers=0, disable_tqdm=True)
    records = []

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.step_t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            records.append({"step": state.global_step, "seconds": time.perf_counter() - self.step_t0})
            if time.perf_counter() - self.t0 >= a.time_budget_s:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kw):
            if records and logs and "reward" in logs:
                records[-1]["reward"] = float(logs["reward"])  # the step's mean success (one 0/1 reward)

    trainer = GRPOTrainer(model=model, reward_funcs=[correctness], args=config,
                          train_dataset=build_dataset(20000, a.seed), processing_class=tokenizer, callbacks=[Budget()])
    t0 = time.time()
    trainer.train()
    train_s = time.time() - t0
    final = os.path.join(a.output_dir, "final")
    trainer.model.save_pretrained(final, safe_serialization=True)
    tokenizer.save_pretrained(final)
    result = {"runner": "trl", "steps": len(records), "train_seconds": train_s, "records": records,
              "responses_per_step": responses, "config": vars(a),
              "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                           "torch": torch.__version__}}
    with open(os.path.join(a.output_dir, "trl_run.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"steps": len(records), "train_seconds": round(train_s, 1)}))


if __name__ == "__main__":
    main()
