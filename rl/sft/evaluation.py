"""What SFT measures on held-out rows: the eval loss (the training loss on rows it never trains on) and, where the
env has a verifier, the env's own greedy eval of the current weights (eval.py's code, as train.py's --eval_steps
validation runs it), logged as eval/loss, eval/pass@1 and the env's metrics (toolcall: Avg Format, Avg Accuracy).

Both are collective under ZeRO-3: every rank runs the same number of forwards (rank_shard pads a short shard with
repeats, which are not counted)."""
import time
from dataclasses import dataclass, replace

import torch

from envs import env_class
from rl.engine import dist
from rl.eval.evaluation import EvalSettings, aggregate, evaluate
from rl.eval.validation import EVAL_BATCH_SIZE, rank_shard
from rl.rollout.samplers import DecodeLoopSampler, SamplingSettings
from rl.run.checkpoint import rng_state, set_rng_state
from rl.sft.data import make_examples, source_rows
from rl.sft.loss import collate, token_nll_sum


@dataclass(frozen=True)
class HeldOutSettings:
    """What SFT's held-out evaluation reads of sft.py's flags."""
    env: str                    # --env: its held-out split and verifier
    eval_limit: int             # --eval_limit: rows of each held-out measure
    eval_data_path: str         # --eval_data_path: the eval loss's rows (None: the env's held-out split)
    env_eval: bool              # not --no_env_eval: the env's greedy eval
    micro: int                  # --per_device_train_batch_size: rows per eval-loss forward
    prompt_key: str
    answer_key: str
    max_prompt_seq_len: int
    max_answer_seq_len: int     # the greedy eval's answer length

    @classmethod
    def from_args(cls, args) -> "HeldOutSettings":
        return cls(env=args.env, eval_limit=args.eval_limit, eval_data_path=args.eval_data_path,
                   env_eval=not args.no_env_eval, micro=args.per_device_train_batch_size, prompt_key=args.prompt_key,
                   answer_key=args.answer_key, max_prompt_seq_len=args.max_prompt_seq_len,
                   max_answer_seq_len=args.max_answer_seq_len)


class HeldOutEval:
    def __init__(self, examples: list, micro: int, actor, tokenizer, sampler=None, rows=None, settings=None):
        self.examples, self.micro, self.actor, self.tokenizer = examples, micro, actor, tokenizer
        self.sampler, self.rows, self.settings = sampler, rows, settings

    @classmethod
    def build(cls, held: HeldOutSettings, env, data_settings, actor, tokenizer, eos_ids) -> "HeldOutEval":
        """The eval loss on --eval_data_path (or the env's held-out split, made into examples by its sft_messages),
        and the greedy eval on the env's held-out split unless --no_env_eval; each left out where there are no
        such rows."""
        env_cls = env_class(held.env)
        held_out = env_cls.dataset("eval", held.eval_limit, 0, **data_settings.env_settings)
        examples = []
        if held.eval_data_path is not None:
            records = source_rows(data_settings, path=held.eval_data_path)[:held.eval_limit]
        else:
            records = [(f"--env {held.env} eval row {i + 1}", row, None) for i, row in enumerate(held_out or [])]
        if records:
            loss_settings = replace(data_settings, packing=False, skip_bad_rows=True)
            examples, _ = make_examples(records, tokenizer, eos_ids, loss_settings, env)
        if not held.env_eval or not held_out or env_cls.make_verifier(answer_key=held.answer_key) is None:
            return cls(examples, held.micro, actor, tokenizer)
        settings = EvalSettings(env_cls=env_cls, n=1, batch_size=EVAL_BATCH_SIZE, prompt_key=held.prompt_key,
                                answer_key=held.answer_key, max_turns=1, max_prompt_seq_len=held.max_prompt_seq_len,
                                env_kwargs={}, env_settings=data_settings.env_settings)
        sampler = DecodeLoopSampler(actor, tokenizer, SamplingSettings(held.max_answer_seq_len, 0.0, 0, 1.0))
        return cls(examples, held.micro, actor, tokenizer, sampler, held_out[:held.eval_limit], settings)

    @torch.no_grad()
    def loss(self) -> dict:
        if not self.examples:
            return {}
        indices, real = rank_shard(len(self.examples), dist.rank(), dist.world_size())
        total = torch.zeros(2, dtype=torch.float64)
        for start in range(0, len(indices), self.micro):
            part = indices[start:start + self.micro]
            batch = collate([self.examples[i] for i in part], self.tokenizer.pad_token_id)
            counted = torch.tensor([float(start + j < real) for j in range(len(part))])  # padding repeats: 0
            batch["loss_mask"] = batch["loss_mask"] * counted[:, None]
            nll, tokens = token_nll_sum(self.actor, {k: v.to(self.actor.device) for k, v in batch.items()})
            total += torch.tensor([float(nll), float(tokens)], dtype=torch.float64)
        total = dist.all_reduce(total)
        return {"eval/loss": total[0].item() / max(total[1].item(), 1.0), "eval/loss_tokens": total[1].item()}

    def greedy(self) -> dict:
        if self.sampler is None:
            return {}
        rng = rng_state()  # the eval must not shift the training's random streams
        indices, real = rank_shard(len(self.rows), dist.rank(), dist.world_size())
        problems = evaluate(self.sampler, self.tokenizer, [self.rows[i] for i in indices], self.settings,
                            show_progress=False, indices=indices)[:real]
        set_rng_state(rng)
        gathered = {i: p for shard in dist.all_gather_object(list(zip(indices[:real], problems))) for i, p in shard}
        ordered = [gathered[i] for i in range(len(self.rows))]
        out = {f"eval/{k}": v for k, v in aggregate(ordered, [1], 1).items()}
        records = [ep for p in ordered for ep in p.get("episodes", [])]
        out.update({f"eval/{k}": v for k, v in self.settings.env_cls.eval_metrics(records).items()})
        return out

    def run(self) -> dict:
        t0 = time.perf_counter()
        was_training = self.actor.training
        self.actor.eval()
        out = {**self.loss(), **self.greedy()}
        self.actor.train(was_training)
        if out:
            out["time/eval"] = time.perf_counter() - t0
        return out
