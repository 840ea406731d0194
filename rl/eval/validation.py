"""Validation during training (--eval_steps): pass@k on held-out rows with eval.py's own code, logged as eval/...

Every --eval_steps steps and after the last step (verl's trainer.test_freq: `is_last_step or step % test_freq ==
0`), and before the first step with --eval_before_train (verl's val_before_train), the actor plays episodes on the
env's held-out split (or --eval_data_path) through `rl.eval.evaluation.evaluate` and `aggregate`, exactly as `python
eval.py` on the exported model would (same env, turns, episode end, prompt and answer lengths; --eval_n samples per
problem at --eval_temperature, greedy by default). The metrics go into that step's metrics.jsonl row and the other
--report_to loggers as `eval/<metric>` (eval/pass@1, eval/best_turn_pass@1, eval/success_by_turn/1, ...).
"""
import argparse
import math
import time
from dataclasses import dataclass

import torch

from rl.engine import dist
from rl.run.checkpoint import rng_state, set_rng_state

EVAL_BATCH_SIZE = 50  # eval.py's --batch_size default


def add_validation_flags(p):
    g = p.add_argument_group("validation during training (the metrics eval.py reports, on held-out rows)")
    g.add_argument("--eval_steps", type=int, default=0,
                   help="every N steps and after the last step, greedy pass@1 on held-out rows, logged as eval/... "
                        "in metrics.jsonl and TensorBoard (TRL's eval_steps, verl's test_freq); 0 = off")
    g.add_argument("--eval_limit", type=int, default=64,
                   help="held-out problems per validation (the first N; eval.py's --limit); spread over the ranks")
    g.add_argument("--eval_data_path", default=None,
                   help="held-out rows in any format --data_path takes (split --eval_data_split); default: the env's "
                        "own held-out split (arith: the rows eval.py uses without --data_path)")
    g.add_argument("--eval_data_split", default="test", help="split of an --eval_data_path folder that has several")
    # credo's reading: verl's val_before_train defaults to True; here it is opt-in, so an --eval_steps run costs what
    # it did before the flag existed (one validation less) and its metrics.jsonl starts at step 1 as every run's.
    g.add_argument("--eval_before_train", action="store_true",
                   help="also validate the initial model, logged as step 0 (verl's trainer.val_before_train); off by "
                        "default")
    g.add_argument("--eval_n", type=int, default=1,
                   help="samples per held-out problem (eval.py's --n); pass@k is logged for k = 1, 2, 4, ..., n; "
                        "default 1")
    g.add_argument("--eval_temperature", type=float, default=0.0,
                   help="sampling temperature of the validation (eval.py's --temperature); default 0 = greedy; "
                        "--eval_n > 1 needs > 0")
    g.add_argument("--save_best_metric", default=None,
                   help="keep the HF export of the best validated step in OUTPUT_DIR/best, by this logged metric "
                        "(OpenRLHF's best_metric_key), e.g. eval/pass@1; lower is better for "
                        "eval/avg_turns_to_success and eval/regression_rate, higher for the rest; default: off")


def validate_validation(args, env_cls, bad):
    """Parse-time checks: the held-out rows exist before a step is trained."""
    if args.eval_steps < 0 or args.eval_limit < 1:
        bad(f"--eval_steps must be >= 0 and --eval_limit >= 1, got {args.eval_steps}, {args.eval_limit}")
    if args.eval_n < 1 or args.eval_temperature < 0:
        bad(f"--eval_n must be >= 1 and --eval_temperature >= 0, got {args.eval_n}, {args.eval_temperature}")
    if args.eval_n > 1 and args.eval_temperature == 0:
        bad("--eval_n > 1 with greedy decoding (--eval_temperature 0) gives n identical samples; set "
            "--eval_temperature")
    if not args.eval_steps:
        for flag, given in (("--eval_before_train", args.eval_before_train),
                            ("--save_best_metric", args.save_best_metric is not None)):
            if given:
                bad(f"{flag} needs validation: add --eval_steps N (N >= --max_steps validates after the last step "
                    f"only)")
        return
    if args.save_best_metric is not None:
        from rl.run.best_checkpoint import check_metric_name
        why = check_metric_name(args.save_best_metric, eval_ks(args.eval_n), args.eval_n, args.max_turns)
        if why:
            bad(f"--save_best_metric {args.save_best_metric}: {why}")
    if args.eval_data_path is not None:
        from rl.rollout.data_files import DataError, data_paths
        try:
            data_paths(args.eval_data_path)
        except DataError as exc:
            bad(f"--eval_data_path: {exc}")
    elif env_cls.dataset("eval", 1, 0, **env_cls.settings_from_args(args)) is None:
        bad(f"--eval_steps: --env {args.env} has no held-out split of its own; pass --eval_data_path")


@dataclass(frozen=True)
class ValidationSettings:
    """What the validation reads of train.py's flags."""
    every: int                 # --eval_steps (0 = off)
    before_train: bool         # --eval_before_train
    limit: int                 # --eval_limit
    n: int                     # --eval_n
    temperature: float         # --eval_temperature
    seed: int                  # --seed
    data_path: str = None      # --eval_data_path (None: the env's held-out split)
    data_split: str = "test"   # --eval_data_split

    @classmethod
    def from_args(cls, args) -> "ValidationSettings":
        return cls(every=args.eval_steps, before_train=bool(args.eval_steps) and args.eval_before_train,
                   limit=args.eval_limit, n=args.eval_n, temperature=args.eval_temperature, seed=args.seed,
                   data_path=args.eval_data_path, data_split=args.eval_data_split)


def eval_rows(settings: ValidationSettings, eval_settings) -> list:
    """The first --eval_limit held-out rows (the rows eval.py --limit N evaluates), read with the env's own flags
    (toolcall's categories, AppWorld's backend) as eval.py reads them."""
    env_cls = eval_settings.env_cls
    if settings.data_path is None:
        return env_cls.dataset("eval", settings.limit, 0, **eval_settings.env_settings)[:settings.limit]
    from rl.rollout.data import DataError, load_rows
    try:
        rows = load_rows(settings.data_path, env_cls.data_keys(eval_settings.prompt_key, eval_settings.answer_key),
                         settings.data_split, check=env_cls.check_row)
    except DataError as exc:
        raise SystemExit(f"train.py: error: bad --eval_data_path data: {exc}") from None
    return rows[:settings.limit]


def eval_ks(n: int) -> list:
    """The k of the logged pass@k: 1, 2, 4, ... up to n, and n itself (credo's reading; eval.py takes --k)."""
    return sorted({n, *(2 ** i for i in range(n.bit_length()) if 2 ** i <= n)})


def rank_shard(n_rows: int, rank: int, world: int) -> tuple:
    """(row indices, how many are real) for one rank: rows i % world == rank (eval.py's sharding), padded by repeating
    its first row (or row 0) to ceil(n / world), so every rank plays the same number of batches: the actor's
    ZeRO-3 generation is collective. Pure function."""
    mine = list(range(rank, n_rows, world))
    width = math.ceil(n_rows / world)
    return mine + [mine[0] if mine else 0] * (width - len(mine)), len(mine)


class PeriodicValidation:
    """Runs the validation at the steps --eval_steps names; `after_step` returns the eval/ metrics (or {}), and
    `before_train` those of the initial model under --eval_before_train. Built by `from_args`."""

    def __init__(self, settings: ValidationSettings, total_steps: int, actor=None, tokenizer=None, sampler=None,
                 eval_settings=None, rows=None):
        self.settings, self.every, self.total = settings, settings.every, total_steps
        self.actor, self.tokenizer, self.sampler = actor, tokenizer, sampler
        self.eval_settings, self.rows, self.ks = eval_settings, rows, eval_ks(settings.n)

    @classmethod
    def from_args(cls, args, actor, tokenizer, total_steps: int) -> "PeriodicValidation":
        settings = ValidationSettings.from_args(args)
        if not settings.every:
            return cls(settings, total_steps)
        from envs import env_class
        from rl.eval.evaluation import EvalSettings
        from rl.rollout.samplers import SamplerSettings, make_sampler
        as_eval_py = argparse.Namespace(**vars(args))
        as_eval_py.env_cls, as_eval_py.batch_size = env_class(args.env), EVAL_BATCH_SIZE
        evaluation = EvalSettings.from_args(as_eval_py, n=settings.n)
        rows = eval_rows(settings, evaluation)
        if not rows:
            raise SystemExit("train.py: error: --eval_steps: the held-out split has no rows")
        # eval.py's sampler: --eval_temperature (0 = greedy), full top-p and top-k (eval.py's defaults), the run's
        # answer length and decode loop; the actor generates (credo's reading): a second vLLM engine per validation
        # would not fit beside the first
        as_eval_py.temperature, as_eval_py.top_p, as_eval_py.top_k = settings.temperature, 1.0, 0
        as_eval_py.rollout_backend = "hf"
        sampler = make_sampler(SamplerSettings.from_args(as_eval_py), actor, tokenizer)
        return cls(settings, total_steps, actor, tokenizer, sampler, evaluation, rows)

    def due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.total)

    def before_train(self, step: int) -> dict:
        """Step 0's validation (a fresh run only: a resumed run validated its start when it began)."""
        return self.validate() if self.settings.before_train and step == 0 else {}

    def after_step(self, step: int) -> dict:
        return self.validate() if self.due(step) else {}

    def validate(self) -> dict:
        from rl.eval.evaluation import aggregate, evaluate
        t0 = time.perf_counter()
        rng = rng_state()  # validation must not shift the training's sampling stream
        # eval.py's seeding, so a sampled validation (--eval_temperature > 0) is the same draw at every step and
        # equals eval.py --seed S on that step's export
        torch.manual_seed(self.settings.seed + dist.rank())
        indices, real = rank_shard(len(self.rows), dist.rank(), dist.world_size())
        was_training = self.actor.training
        problems = evaluate(self.sampler, self.tokenizer, [self.rows[i] for i in indices], self.eval_settings,
                            show_progress=False, indices=indices)[:real]
        self.actor.train(was_training)
        set_rng_state(rng)
        gathered = {i: p for shard in dist.all_gather_object(list(zip(indices[:real], problems))) for i, p in shard}
        metrics = aggregate([gathered[i] for i in range(len(self.rows))], self.ks, self.eval_settings.max_turns)
        out = {f"eval/{k}": v for k, v in metrics.items()}
        out["eval/num_problems"] = float(len(self.rows))
        out["time/eval"] = time.perf_counter() - t0
        return out
