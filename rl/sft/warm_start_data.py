"""Warm-start data from an env's train split only: `python -m rl.sft.warm_start_data --env toolcall --out FILE`.

Each row of the env's train split (or of a --data_path of train rows, e.g. data/math_train/train.jsonl for --env math)
becomes one prompt-completion example: the prompt is the chat the env opens an episode with (so SFT sees exactly the
prompts RL will), the completion is the env's `sft_target(row)`, kept only when the env's own verifier gives it full
marks (a target the checker rejects would teach a wrong answer; they are counted). Never a held-out row: the env's
held-out split is excluded by construction (arith, mixed: a fixed partition of the problem space; toolcall: BFCL's
id hash), and rows whose prompt appears in the env's default eval file (MATH-500 for math) are refused, counted.

Written as JSONL with {"id", "env", "prompt": [messages], "completion": [one assistant message]}: TRL's
conversational prompt-completion format, which sft.py trains on the completion only.
"""
import argparse
import json
import os
import sys

from envs import env_class
from envs.base import SUCCESS_THRESHOLD
from envs.toolcall import add_toolcall_env_flags
from rl.rollout.data import load_rows


def held_out_prompts(env_cls, settings: dict, prompt_key: str) -> set:
    """The prompts of the env's held-out rows: its own eval split (first 10,000) and its default eval file."""
    rows = list(env_cls.dataset("eval", 10000, 0, **settings) or [])
    if env_cls.default_eval_data:
        from envs.base import REPO_ROOT
        rows += load_rows(os.path.join(REPO_ROOT, env_cls.default_eval_data), ())
    return {json.dumps(r.get(prompt_key, r.get("question", r.get("prompt"))), sort_keys=True) for r in rows}


def warm_start_rows(env_name: str, n: int, seed: int, settings: dict, data_path: str = None) -> tuple:
    """(examples, counts) of up to n train rows of `env_name` made into prompt-completion examples."""
    env_cls = env_class(env_name)
    prompt_key, answer_key = env_cls.default_prompt_key, env_cls.default_answer_key
    if data_path is not None:
        rows = load_rows(data_path, env_cls.data_keys(prompt_key, answer_key))
    else:
        rows = env_cls.dataset("train", n, seed, **settings)
        if rows is None:
            raise SystemExit(f"warm_start_data: --env {env_name} has no train split of its own: pass --data_path "
                             f"(its train rows)")
    held_out = held_out_prompts(env_cls, settings, prompt_key)
    env = env_cls(prompt_key=prompt_key, answer_key=answer_key, **settings)
    examples, counts = [], {"rows": 0, "held_out_refused": 0, "target_rejected": 0, "no_target": 0}
    for i, row in enumerate(rows):
        if len(examples) >= n:
            break
        counts["rows"] += 1
        if json.dumps(row.get(prompt_key, row.get("question", row.get("prompt"))), sort_keys=True) in held_out:
            counts["held_out_refused"] += 1
            continue
        try:
            prompt, completion = env.sft_messages(row)
        except (NotImplementedError, KeyError, AttributeError):
            counts["no_target"] += 1
            continue
        if env.step(completion[0]["content"]).score < SUCCESS_THRESHOLD:  # the env's verifier must accept it
            counts["target_rejected"] += 1
            continue
        examples.append({"id": row.get("id", f"{env_name}-train-{i}"), "env": env_name, "prompt": prompt,
                         "completion": completion})
    counts["examples"] = len(examples)
    return examples, counts


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rl.sft.warm_start_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", required=True, help="the env whose train split becomes SFT examples")
    p.add_argument("--out", required=True, help="JSONL file to write (its folder is made)")
    p.add_argument("--n", type=int, default=1000, help="examples at most")
    p.add_argument("--seed", type=int, default=0, help="the env's train-split seed (arith, mixed)")
    p.add_argument("--data_path", default=None, help="train rows of a data-backed env (math: data/math_train)")
    add_toolcall_env_flags(p)
    args = p.parse_args(argv)
    try:
        env_cls = env_class(args.env)
    except KeyError as exc:
        p.error(exc.args[0])
    examples, counts = warm_start_rows(args.env, args.n, args.seed, env_cls.settings_from_args(args), args.data_path)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        for example in examples:
            f.write(json.dumps(example, ensure_ascii=False) + "\n")
    os.replace(args.out + ".tmp", args.out)
    print(f"{args.out}: {json.dumps(counts)}", file=sys.stderr)


if __name__ == "__main__":
    main()
