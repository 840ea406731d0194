"""MAESTRO in the training step: the five open-domain rewards, the per-response reward weights before the advantages
(the Conductor's emphasis actions, or an ablation's), and the Conductor's buffered REINFORCE meta-update after them
(the `maestro` method of rl/methods/).
The rewards are computed once, by the scorer, as every --reward_funcs reward is; this method's `scalarize`
turns each response's rewards into its scalar with its own weights.

Rewards (each on [0, 1] as scored; rewards/policy_rewards.py defines them, with their signs and sources):
- fmt: the response has the required structure (--format_style);      - len: linear in the response's tokens
- ppl: NOVER's reasoning perplexity of the reference answer (lower better); - ent: mean token entropy (higher better)
- pref: a reward model's score (--reward_model_name_or_path; skipped with a warning without one)
ppl, ent and pref are rank-normalised within each group (their raw scales are arbitrary). `correctness` (the env
verifier) may be added to the mix with --maestro_rewards. Before mixing, --maestro_reward_scale puts them on the one
scale the Conductor compares them on: batch_rank (credo's reading, default: each reward's rank over the whole batch,
so every reward has batch mean 0.5) or none (the paper's scales, under which the Conductor's meta-reward favours
whichever reward's level is highest: rl/advantages/maestro.py derives it, mechanisms/maestro_scales.py measures it).

--maestro_weights: conductor (sampled actions a ~ pi(. | h), w(a) below), equal (1/K), random (the paper's Rand: a
random weight vector per response, Dirichlet(1)), random_action (a uniform random action per response, w(a)).
The emphasis weights w(a) = (1 - eta) / K + eta * onehot(a) are credo's reading (rl/advantages/maestro.py).
With --maestro_kl_in_reward beta_r, each response's reward is w . r - beta_r * KL(policy || reference) on it (the
paper puts the KL into the reward, beta 0.1 in its Table 7), so the Conductor's meta-reward, the advantage, sees it.
"""
import logging
import os
import time
from dataclasses import dataclass

import torch

from rl.engine import dist
from rl.advantages.grpo import grpo
from rl.advantages.maestro import REWARD_SCALES, emphasis_weights, mixed_reward, scale_rewards
from rl.methods.maestro_conductor import HIDDEN_NORMS, RECIPES, ConductorLearner
from rl.methods.base import Method, config_from_args

logger = logging.getLogger(__name__)
MAESTRO_REWARDS = ("fmt", "ppl", "ent", "len", "pref", "correctness")
MAESTRO_WEIGHTS = ("conductor", "equal", "random", "random_action")
META_REWARDS = ("advantage", "centred")
PAPER = RECIPES["paper"]
# --maestro_recipe paper also sets the training settings of the paper's Table 7 that credo has a flag for (each only
# where the flag is not given). Sources, all second-hand (credo has not read the paper's table itself: neither the
# paper nor the authors' code, zy125413/MAESTRO, is in the repo): the KL 0.1, put into the reward, as issue #49
# records Table 7; the other three as issue #50 records it ("sequence-level importance sampling and a
# top-entropy-quantile token mask (0.2), with reference-model sync"). Issue #61 records Table 7 otherwise: reference
# sync every 6 steps (12 for the SS-GEN row), the Dr.GRPO loss aggregation as TRL computes it, masked truncated
# completions, temperature 0.8, and the group size, learning rate and batch; it names neither GSPO nor a token mask.
# The two records disagree; #61 item 2 is to make this recipe equal the table. Sequence-level importance sampling is
# read as TRL's importance_sampling_level="sequence", which is GSPO's ratio (--loss_mode gspo), not a vLLM rollout
# correction.
TABLE7_TRAINING = {"maestro_kl_in_reward": 0.1, "loss_mode": "gspo", "top_entropy_quantile": 0.2,
                   "sync_ref_model": True}
# What the recipe cannot set, because the repo does not record the value: the sync's alpha and interval (TRL's
# defaults 0.6 / 512 then apply), GSPO's clip range (credo's 0.2 applies; GSPO's own recipe uses 3e-4 / 4e-4), and
# the policy's optimiser, batch, group size and lengths.
_PREF_SKIP_WARNED = []  # once per process: compare.py --plan validates every run's flags, which repeated the line 9x


def hidden_size(model) -> int:
    config = model.config
    return getattr(config, "hidden_size", None) or config.get_text_config().hidden_size


def mean_weights_by_kind(weights: torch.Tensor, kinds: list, names: list, prefix: str) -> dict:
    """{prefix/<kind>/<reward>: mean weight over that kind's responses}; rows without a kind are left out.
    weights: Tensor[N, K]; kinds: N prompt kinds (a row's `kind` field, e.g. --env mixed's arith / describe)."""
    out = {}
    for kind in sorted({k for k in kinds if k is not None}, key=str):
        rows = torch.tensor([k == kind for k in kinds])
        out.update({f"{prefix}/{kind}/{name}": weights[rows, j].mean().item() for j, name in enumerate(names)})
    return out


@dataclass
class MaestroConfig:
    maestro_weights: str
    maestro_emphasis: float
    maestro_kl_in_reward: float
    maestro_reward_scale: str
    maestro_meta_reward: str
    scale_rewards: str
    maestro_lr: float            # the Conductor's (resolved from --maestro_recipe when unset)
    maestro_entropy_coef: float
    maestro_update_interval: int
    maestro_tau_init: float
    maestro_hidden_norm: str
    seed: int
    per_device_train_micro_batch_size: int  # the KL-in-reward forwards (response_kl)
    temperature: float
    kl_type: str
    rewards: tuple = ()          # the rewards the Conductor mixes (Maestro.reward_names: --maestro_rewards, less pref
                                 # without a reward model)


class Maestro(Method):
    name = "maestro"
    summary = "a learned Conductor picks each response's reward trade-off"
    Config = MaestroConfig

    @classmethod
    def add_flags(cls, parser):
        g = parser.add_argument_group("MAESTRO (a Conductor mixes open-domain rewards per response)")
        g.add_argument("--maestro_rewards", default="fmt,ppl,ent,len,pref",
                       help=f"rewards the Conductor chooses between, from {','.join(MAESTRO_REWARDS)} (paper: the first five)")
        g.add_argument("--maestro_weights", choices=MAESTRO_WEIGHTS, default="conductor",
                       help="who sets each response's reward weights: conductor (sampled emphasis actions); equal (1/K); "
                            "random (the paper's Rand: a random weight vector per response, Dirichlet(1) = uniform on "
                            "the simplex); random_action (a uniform random emphasis action per response)")
        g.add_argument("--maestro_reward_scale", choices=REWARD_SCALES, default="batch_rank",
                       help="the one scale the Conductor compares the rewards on, applied to the whole batch before "
                            "mixing: batch_rank (default; credo's reading, the paper is silent): each reward replaced "
                            "by its rank over the batch on [0, 1], so every reward has batch mean 0.5 and none wins a "
                            "prompt kind by its offset or unit; none: as scored (fmt and len raw on [0, 1], ppl "
                            "and ent group ranks with mean 0.5 as the paper names them; pref's group rank is credo's "
                            "reading), under which the Conductor's "
                            "meta-reward picks the reward with the highest level (a 3-seed sweep put pi 0.999 on "
                            "len: experiments/README.md). Not --scale_rewards, which is GRPO's std scaling of the advantage")
        g.add_argument("--maestro_meta_reward", choices=META_REWARDS, default="advantage",
                       help="what the Conductor's REINFORCE update reads per response: advantage (default; the paper: "
                            "the GRPO group advantage of the response's mixed reward, under --scale_rewards); centred "
                            "(credo's reading, not the paper's): that mixed reward minus its group mean, without "
                            "--scale_rewards' std division. Under the std division the advantage counts how often a "
                            "response beats its group, not by how much, so at equal levels a reward's shape tilts the "
                            "choice (a tied block at its top is favoured: experiments/mechanisms/"
                            "maestro_shape.py); centred compares the rewards by their margins. The policy's advantage "
                            "is unchanged")
        g.add_argument("--maestro_emphasis", type=float, default=0.5,
                       help="eta in w(a) = (1 - eta) / K + eta * onehot(a): credo's reading, not in the paper's text, "
                            "which says only that an action induces a weight configuration; 1.0 = pure emphasis")
        g.add_argument("--maestro_recipe", choices=tuple(RECIPES), default=None,
                       help=f"Conductor optimisation preset. Unset: the paper's Conductor (raw h, lr {PAPER['lr']:g}, "
                            f"an update every {PAPER['update_interval']} steps; for GPU-length runs: in a 40-step run the "
                            "Conductor barely moves) with credo's update defaults. paper: that Conductor and the "
                            "training settings of the paper's Table 7 that credo has: --maestro_kl_in_reward 0.1, "
                            "--loss_mode gspo (its sequence-level importance sampling), --top_entropy_quantile 0.2, "
                            "--sync_ref_model (the last three from one second-hand record of Table 7 that another "
                            "contradicts; both unchecked against the paper's text: docs/maestro.md); it cannot set "
                            "the sync's alpha and interval (TRL's defaults 0.6 / 512), "
                            "GSPO's clip range, the optimiser, batch or lengths, which the repo does not record. "
                            "small: credo's deviation for short CPU runs: unit-norm h, "
                            f"lr {RECIPES['small']['lr']:g}, an update every step. Every flag given explicitly wins")
        g.add_argument("--maestro_hidden_norm", choices=HIDDEN_NORMS, default=None,
                       help="Conductor input: none = the raw final hidden state (paper); l2 = scaled to unit norm; "
                            "unset (None) = --maestro_recipe's")
        g.add_argument("--maestro_update_interval", type=int, default=None,
                       help=f"steps between Conductor REINFORCE updates; unset (None) = --maestro_recipe's "
                            f"(paper: {PAPER['update_interval']})")
        g.add_argument("--maestro_lr", type=float, default=None,
                       help=f"Conductor AdamW learning rate; unset (None) = --maestro_recipe's (paper: {PAPER['lr']:g})")
        g.add_argument("--maestro_entropy_coef", type=float, default=1e-3, help="Conductor entropy bonus (paper: 1e-3)")
        g.add_argument("--maestro_tau_init", type=float, default=1.0, help="initial (learned) Conductor temperature")
        g.add_argument("--maestro_kl_in_reward", type=float, default=None,
                       help="beta_r: each response's reward becomes w . r - beta_r * KL(policy || reference) on it "
                            "(--kl_type estimator, mean over its tokens), so the advantage the Conductor learns from "
                            "includes it (the paper: 0.1, its Table 7; set by --maestro_recipe paper). 0 = off, "
                            "credo's default: the KL stays in the loss (--beta) as in GRPO. > 0 loads the frozen "
                            "reference even with --beta 0")

    @classmethod
    def reward_names(cls, args) -> list:
        """--maestro_rewards, less pref without a reward model (skipped with a warning, as the paper's pref needs one)."""
        return [n for n in args.maestro_rewards if n != "pref" or args.reward_model_name_or_path]

    @classmethod
    def check_flags(cls, args, bad):
        resolve_recipe(args)
        if args.maestro_kl_in_reward < 0:
            bad(f"--maestro_kl_in_reward must be >= 0, got {args.maestro_kl_in_reward}")
        if args.algo != "maestro" and args.maestro_kl_in_reward > 0:
            bad("--maestro_kl_in_reward puts the KL into MAESTRO's mixed reward and needs --algo maestro "
                "(other methods: --beta puts it in the loss)")

    @classmethod
    def validate(cls, args, bad):
        args.maestro_rewards = [n.strip() for n in args.maestro_rewards.split(",") if n.strip()]
        unknown = [n for n in args.maestro_rewards if n not in MAESTRO_REWARDS]
        if unknown:
            bad(f"--maestro_rewards: unknown reward(s) {','.join(unknown)}; choose from {','.join(MAESTRO_REWARDS)}")
        if len(set(args.maestro_rewards)) != len(args.maestro_rewards):
            bad(f"--maestro_rewards lists a reward twice: {','.join(args.maestro_rewards)}")
        if len(cls.reward_names(args)) < 2:
            bad("--maestro_rewards needs at least two rewards to orchestrate (pref counts only with "
                "--reward_model_name_or_path)")
        if args.max_turns != 1:
            bad("--algo maestro scores single responses; use --max_turns 1")
        if args.reward_funcs != ["correctness"] or args.reward_weights is not None:
            bad("--algo maestro mixes --maestro_rewards with the Conductor's weights; drop --reward_funcs / "
                "--reward_weights (add `correctness` to --maestro_rewards to mix in the verifier)")
        if not 0 <= args.maestro_emphasis <= 1:
            bad(f"--maestro_emphasis must be in [0, 1], got {args.maestro_emphasis}")
        if args.maestro_update_interval < 1 or args.maestro_tau_init <= 0:
            bad("--maestro_update_interval must be >= 1 and --maestro_tau_init > 0")
        if args.maestro_lr < 0:
            bad(f"--maestro_lr must be >= 0, got {args.maestro_lr}")
        if ("pref" in args.maestro_rewards and not args.reward_model_name_or_path and os.environ.get("RANK", "0") == "0"
                and not _PREF_SKIP_WARNED):
            _PREF_SKIP_WARNED.append(True)
            logger.warning("MAESTRO: no --reward_model_name_or_path given; the `pref` reward is skipped")

    @classmethod
    def needs_reference(cls, args) -> bool:
        return bool(args.maestro_kl_in_reward)  # the KL inside the mixed reward reads the reference

    @classmethod
    def from_args(cls, args, ctx=None) -> "Maestro":
        return cls(config_from_args(cls.Config, args, rewards=tuple(cls.reward_names(args))), ctx)

    # --- one step ---------------------------------------------------------------------------------------------
    def __init__(self, config, ctx=None):
        super().__init__(config, ctx)
        self.pending = None  # (global hidden, actions) of this step, for the Conductor's update after the advantages
        self.score_metrics, self.score_timings = {}, {}
        if ctx is None:  # the advantage maths alone (benchmarks/bench_advantages.py): no Conductor
            return
        self.names = list(self.config.rewards)
        model = getattr(ctx.actor, "module", ctx.actor)
        c = self.config
        self.learner = ConductorLearner(hidden_size(model), len(self.names), lr=c.maestro_lr,
                                        entropy_coef=c.maestro_entropy_coef,
                                        update_interval=c.maestro_update_interval, tau_init=c.maestro_tau_init,
                                        hidden_norm=c.maestro_hidden_norm, seed=c.seed)
        # The Conductor lives on the CPU, with the scores and reward components it mixes and the CPU generator its
        # actions are sampled from; only the actor's hidden states come from the GPU (moved in `weights`). On the
        # actor's device its actions were CUDA tensors mixed with CPU components: every GPU step failed.

    def response_kl(self, batch) -> torch.Tensor:
        """Per-response mean KL(policy || reference) over its tokens (--kl_type estimator). Tensor[n] on CPU.

        The reference log-probs are kept on the batch, so the loss does not compute them a second time."""
        from rl.update.batching import batched_response_logprobs
        from rl.update.loss import kl_penalty
        ctx, a = self.ctx, self.config
        micro = a.per_device_train_micro_batch_size
        ctx.actor.eval()
        logp = batched_response_logprobs(ctx.actor, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                         a.temperature, micro)
        ctx.actor.train()
        batch.ref_logp = batched_response_logprobs(ctx.reference, batch.input_ids, batch.attention_mask,
                                                   batch.prompt_len, a.temperature, micro)
        mask = batch.response_mask.to(logp.device)
        kl = kl_penalty(logp, batch.ref_logp, a.kl_type) * mask
        return (kl.sum(1) / mask.sum(1).clamp(min=1)).float().cpu()

    def weights(self, n: int, hidden: torch.Tensor):
        """(weights Tensor[N, K], actions Tensor[N] or None, probs Tensor[N, K] or None) for the N global rows."""
        c, k = self.config, len(self.names)
        if c.maestro_weights == "conductor":
            h = dist.all_gather_cat(hidden)
            actions, probs = self.learner.act(h.to(self.learner.conductor.log_tau.device))
            self.pending = (h, actions)
            return emphasis_weights(actions, k, c.maestro_emphasis), actions, probs.cpu()
        if c.maestro_weights == "random_action":
            actions = self.learner.random_actions(n)
            return emphasis_weights(actions, k, c.maestro_emphasis), actions, None
        if c.maestro_weights == "random":
            return self.learner.random_weight_vectors(n), None, None
        return torch.full((n, k), 1.0 / k), None, None

    def scalarize(self, batch, components):
        """Each response's reward w_i . r_i (minus beta_r * its KL with --maestro_kl_in_reward), w_i from the
        Conductor's action for it (or the ablation's), r_i on --maestro_reward_scale's scale over the whole batch.
        components: the scorer's {name: Tensor[n]} on [0, 1]."""
        c, rank = self.config, self.ctx.rank
        t0 = time.perf_counter()
        kl = self.response_kl(batch) if c.maestro_kl_in_reward > 0 else None
        t1 = time.perf_counter()
        group_ids = dist.all_gather_cat(batch.group_ids)
        matrix = torch.stack([dist.all_gather_cat(components[k]) for k in self.names], dim=1)   # [N, K] global
        matrix = scale_rewards(matrix, c.maestro_reward_scale)  # batch-global, so every rank scales alike
        weights, actions, probs = self.weights(len(group_ids), batch.policy_hidden)
        n = len(batch)
        mine = slice(rank * n, (rank + 1) * n)
        if actions is not None:
            batch.extras["actions"] = actions[mine]
        if probs is not None:  # each response's own pi(. | h_i): completions.jsonl carries it for offline analysis
            batch.extras["pi"] = probs[mine]
        scores = mixed_reward(matrix[mine], weights[mine])
        if kl is not None:
            scores = scores - c.maestro_kl_in_reward * kl
        m = {f"conductor/weight/{name}": weights[:, j].mean().item() for j, name in enumerate(self.names)}
        raw = {name: dist.all_gather_cat(batch.reward_raw[name]) for name in self.names}
        m.update({f"maestro/raw/{name}": v[~torch.isnan(v)].mean().item() if (~torch.isnan(v)).any()
                  else float("nan") for name, v in raw.items()})
        m["conductor/tau"] = self.learner.conductor.tau
        kinds = [kind for kinds in dist.all_gather_object([s.get("kind") for s in batch.samples]) for kind in kinds]
        m.update(mean_weights_by_kind(weights, kinds, self.names, "conductor/weight"))
        # each reward's level per kind as mixed: what the Conductor's meta-reward ranks (rl/advantages/maestro.py)
        m.update(mean_weights_by_kind(torch.nan_to_num(matrix, nan=0.0), kinds, self.names, "maestro/level"))
        if probs is not None:
            m["conductor/entropy"] = -(probs * probs.log()).sum(-1).mean().item()
            m.update(mean_weights_by_kind(probs, kinds, self.names, "conductor/pi"))
        if kl is not None:
            m["maestro/kl_in_reward"] = dist.all_gather_cat(kl).mean().item()
        self.score_metrics = m
        self.score_timings = {"conductor": time.perf_counter() - t1}
        if kl is not None:
            self.score_timings["maestro_kl"] = t1 - t0
        return scores

    def after_score(self, batch, timings):
        """The metrics of this step's scalarisation (the scorer called `scalarize` during scoring)."""
        timings.update(self.score_timings)
        metrics, self.score_metrics = self.score_metrics, {}
        return metrics

    def advantages(self, batch):
        """The GRPO group advantage of the scalarised rewards (rl.advantages.maestro's grpo(w(a_i) . r_i)); the
        Conductor's meta-reward."""
        return grpo(batch.scores, batch.group_ids, scale=self.config.scale_rewards), {}

    def after_advantages(self, batch, advantages, timings):
        if self.pending is None:
            return {}
        t0 = time.perf_counter()
        h, actions = self.pending
        self.pending = None
        meta = advantages if self.config.maestro_meta_reward == "advantage" else grpo(batch.scores, batch.group_ids,
                                                                                       scale="none")
        metrics = self.learner.record(h, actions, meta)
        timings["conductor"] = timings.get("conductor", 0.0) + time.perf_counter() - t0
        return metrics

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict()} if self.ctx is not None else {}

    def load_state_dict(self, state: dict):
        if "learner" in state:
            self.learner.load_state_dict(state["learner"])


def resolve_recipe(args):
    """Fill the flags left unset from --maestro_recipe (explicit flags win): the Conductor's (unset recipe: the
    paper's), and under `paper` with --algo maestro Table 7's training settings (TABLE7_TRAINING)."""
    recipe = RECIPES[args.maestro_recipe or "paper"]
    for key in ("hidden_norm", "lr", "update_interval"):
        if getattr(args, f"maestro_{key}") is None:
            setattr(args, f"maestro_{key}", recipe[key])
    if args.maestro_recipe == "paper" and args.algo == "maestro":
        for flag, value in TABLE7_TRAINING.items():
            if getattr(args, flag) is None:
                setattr(args, flag, value)
    if args.maestro_kl_in_reward is None:
        args.maestro_kl_in_reward = 0.0
