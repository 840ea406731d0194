"""Evaluate any HF checkpoint on its own: greedy accuracy with the env's verifier.

    python eval.py --model_name_or_path output/run/final --env arith --num_samples 200
    python eval.py --model_name_or_path MODEL --env math --data_path data/math500/test.jsonl
"""
import argparse
import json
import os
import time

import torch

from envs import ENVS, env_class, make_env
from rl.data import load_jsonl_rows
from rl.models import DEFAULT_MODEL_DIR, load_tokenizer
from rl.rollout import encode_prompts, eos_ids, response_mask_from_ids


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model_name_or_path", default=DEFAULT_MODEL_DIR, help="HF model folder (e.g. OUTPUT_DIR/final)")
    p.add_argument("--env", default="arith", help=f"environment whose verifier scores answers: {sorted(ENVS)} or module:Class")
    p.add_argument("--data_path", default=None, help="JSONL of eval rows; arith uses its held-out split when omitted")
    p.add_argument("--prompt_key", default="problem")
    p.add_argument("--answer_key", default="answer")
    p.add_argument("--num_samples", type=int, default=200, help="rows evaluated (the first N)")
    p.add_argument("--batch_size", type=int, default=50, help="prompts per generate call")
    p.add_argument("--max_prompt_seq_len", type=int, default=256)
    p.add_argument("--max_answer_seq_len", type=int, default=32, help="max new tokens (greedy)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--output_file", default=None, help="write the summary and every response as JSON here")
    p.add_argument("--label", default="accuracy", help="printed as `<label>: X` (X = percent correct)")
    return p


def eval_rows(args) -> list:
    if args.data_path:
        rows = load_jsonl_rows(args.data_path, (args.prompt_key, args.answer_key))
    else:
        rows = env_class(args.env).dataset("eval", args.num_samples, 0)
        if rows is None:
            raise SystemExit(f"eval.py: error: --env {args.env} needs --data_path")
    return rows[:args.num_samples]


@torch.no_grad()
def greedy_accuracy(model, tokenizer, env, rows, args) -> dict:
    eos = eos_ids(tokenizer, model)
    records = []
    for start in range(0, len(rows), args.batch_size):
        chunk = rows[start:start + args.batch_size]
        ids, mask = encode_prompts(tokenizer, [env.reset(r) for r in chunk], args.max_prompt_seq_len)
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=args.max_answer_seq_len,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
        resp = out[:, ids.shape[1]:]
        resp = torch.where(response_mask_from_ids(resp, eos).bool(), resp, torch.full_like(resp, tokenizer.pad_token_id))
        for row, text in zip(chunk, tokenizer.batch_decode(resp, skip_special_tokens=True)):
            env.reset(row)
            records.append({"prompt": row.get("prompt", row.get(args.prompt_key)), "answer": row.get(args.answer_key),
                            "response": text, "score": env.step(text).score})
    correct = sum(r["score"] >= 1.0 - 1e-6 for r in records)
    return {"accuracy": 100.0 * correct / max(len(records), 1), "num_samples": len(records), "records": records}


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not os.path.exists(args.model_name_or_path):
        raise SystemExit(f"eval.py: error: --model_name_or_path {args.model_name_or_path} does not exist")
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(args.model_name_or_path)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=dtype).eval()
    env = make_env(args.env, prompt_key=args.prompt_key, answer_key=args.answer_key)
    t0 = time.perf_counter()
    result = greedy_accuracy(model, tokenizer, env, eval_rows(args), args)
    result.update(model=args.model_name_or_path, env=args.env, seconds=time.perf_counter() - t0)
    if args.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(args.output_file)), exist_ok=True)
        with open(args.output_file, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{args.label}: {result['accuracy']:.1f}", flush=True)
    return result


if __name__ == "__main__":
    main()
