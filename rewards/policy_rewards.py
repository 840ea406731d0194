"""MAESTRO's five open-domain rewards (`fmt`, `ppl`, `ent`, `len`, `pref`) and EM-GRPO's `em_ent`, for any method:
`--reward_funcs ppl` is NOVER, `--reward_funcs em_ent` is EM-GRPO, and the five are MAESTRO's inside `--algo maestro`.

They run in the trainer's process, not in the reward workers (rewards/pooled.py): `ppl` and the entropies are forwards of the
policy itself (a ZeRO-3 engine whose forwards are collective), `pref` a reward model's, and `fmt` / `len` are cheap
functions of the response that MAESTRO scores alongside them (so that `len` counts the generated tokens exactly).

Sign conventions (higher is better after them; then rank-normalised to [0, 1] within each prompt group):
- ppl: NOVER (Liu et al. 2025, arXiv 2505.16022, the reasoning perplexity P_r): "a lower P_r indicates that the
  ground truth is more predictable given the reasoning", so the reward is -log P_r = -mean NLL / N(|t|).
  Only NOVER's reasoning reward: its format gate and efficiency reward are not reproduced (add `fmt` to the mix).
- ent: MAESTRO's entropy reward, "to balance exploration" (MAESTRO section 4.1): higher mean token entropy scores
  higher. On SS-GEN its Conductor weights it most, "encouraging exploration and expressive diversity", which the
  paper contrasts with EM-GRPO, which "applies a negative entropy reward" (sections 4.1 and 4.3).
- em_ent: EM-GRPO's reward, from EM-RL (Agarwal et al. 2025, "The Unreasonable Effectiveness of Entropy Minimization
  in LLM Reasoning", arXiv 2505.15134): "negative entropy as the only reward to maximize", so -(mean token
  entropy): the opposite sign of `ent`. credo's reading for both: the mean over the response's tokens (MAESTRO's
  definition), where EM-RL-token sums them.
- pref: the reward model's score, higher preferred.
- fmt, len: already on [0, 1] (rewards/format.py, rewards/length.py), not normalised.
Rank normalisation (group_rank_normalize, below): MAESTRO's paper names it for perplexity and entropy; applying it for
every method, and to pref too, is credo's reading: the raw scales of ppl, ent and pref are arbitrary and differ by
orders of magnitude, and a rank is robust to their outliers.
MAESTRO then puts all its rewards on one scale before mixing them (--maestro_reward_scale, rl/advantages/maestro.py):
a group rank has mean 0.5 in every group while fmt and len keep their own levels, and its Conductor favours whichever
reward's level is highest.
"""
import logging
from dataclasses import dataclass

import torch

from rewards.format import FormatReward
from rewards.length import DEFAULT_LEN_MAX, DEFAULT_LEN_MIN, linear_length_score
from rewards.policy_signals import entropy_and_last_hidden, mean_over_mask, nover_example, nover_length_factor
from rewards.prefix_nll import cached_reference_nll

logger = logging.getLogger(__name__)
POLICY_REWARDS = ("fmt", "ppl", "ent", "em_ent", "len", "pref")
SIGNS = {"ppl": -1.0, "ent": 1.0, "em_ent": -1.0, "pref": 1.0}  # applied before the rank normalisation; see the module docstring


@dataclass(frozen=True)
class PolicyRewardSettings:
    """The flags the in-process rewards read (names as on the command line)."""
    format_style: str
    reward_model_name_or_path: str   # `pref`'s reward model (None: no pref)
    per_device_train_micro_batch_size: int
    temperature: float               # the rollout's: entropy of the distribution that sampled
    len_min: int
    len_max: int
    answer_key: str

    @classmethod
    def from_args(cls, args) -> "PolicyRewardSettings":
        return cls(format_style=args.format_style, reward_model_name_or_path=args.reward_model_name_or_path,
                   per_device_train_micro_batch_size=args.per_device_train_micro_batch_size,
                   temperature=args.temperature, len_min=args.len_min, len_max=args.len_max,
                   answer_key=args.answer_key)


def add_policy_reward_flags(p):
    """The open-domain rewards' flags (fmt, ppl, ent, len, pref): any method can name them in --reward_funcs, and
    MAESTRO mixes the same rewards."""
    g = p.add_argument_group("open-domain rewards (--reward_funcs fmt, ppl, ent, len, pref; MAESTRO's rewards)")
    g.add_argument("--len_min", type=int, default=DEFAULT_LEN_MIN,
                   help="len reward: 1 at or below this many response tokens")
    g.add_argument("--len_max", type=int, default=DEFAULT_LEN_MAX,
                   help="len reward: falls linearly to 0 at this many tokens")
    g.add_argument("--reward_model_name_or_path", default=None,
                   help="sequence-classification reward model for the pref reward (MAESTRO skips pref with a warning "
                        "when unset; --reward_funcs pref refuses to start). credo's reading: loaded whole on every "
                        "rank, outside the actor's ZeRO-3 partitioning")


class PolicyRewards:
    """Scores a rollout batch on `names` (a subset of POLICY_REWARDS) with the policy `actor` (an engine or HF LM).

    `pref` needs settings.reward_model_name_or_path; the caller decides whether a missing one is an error or a skip.
    """

    def __init__(self, names, settings: PolicyRewardSettings, actor, tokenizer):
        unknown = [n for n in names if n not in POLICY_REWARDS]
        if unknown:
            raise ValueError(f"not policy rewards: {unknown}; choose from {POLICY_REWARDS}")
        self.names, self.settings, self.actor, self.tokenizer = list(names), settings, actor, tokenizer
        # entropy and the Conductor's hidden state, recorded by the sampling pass where the sampler can (raw()); for
        # ppl also each row's KV cache, so NOVER's forward feeds only the answer (rewards/prefix_nll.py)
        self.sampling_signals = frozenset({"entropy", "hidden"} | ({"prefix_kv"} if "ppl" in self.names else set()))
        self.format = FormatReward(settings.format_style)
        self.preference = None
        if "pref" in self.names:
            from rewards.preference import PreferenceReward
            self.preference = PreferenceReward(settings.reward_model_name_or_path, device=actor.device)

    def raw(self, batch):
        """({name: Tensor[n]} on each reward's own scale, final hidden state Tensor[n, H]) for this rank's rows.

        raw ppl is log P_r (NaN where the row has no reference answer), raw ent the mean token entropy. Entropy and
        hidden state come from the sampling pass (batch.signals, rl/rollout/sampling_signals.py) where it recorded them, the
        same values within float tolerance; else from a no-grad forward.
        """
        a, micro = self.settings, self.settings.per_device_train_micro_batch_size
        was_training = self.actor.training
        self.actor.eval()
        signals = getattr(batch, "signals", None)
        if signals is not None and signals.entropy is not None and signals.last_hidden is not None:
            if signals.entropy.shape != batch.response_mask.shape or len(signals.last_hidden) != len(batch.input_ids):
                raise ValueError(f"batch.signals ({tuple(signals.entropy.shape)}) do not match the rollout's responses "
                                 f"({tuple(batch.response_mask.shape)}): code that changes a Rollout's rows must change "
                                 "its signals too (rl.rollout.sampling_signals.SamplingSignals.select)")
            entropy = mean_over_mask(signals.entropy, batch.response_mask)
            hidden = signals.last_hidden.float().cpu()
        else:
            entropy, hidden = entropy_and_last_hidden(self.actor, batch.input_ids, batch.attention_mask,
                                                      batch.prompt_len, batch.response_mask, a.temperature, micro)
        raw = {}
        for name in self.names:
            if name == "fmt":
                raw[name] = torch.tensor([self.format(None, c, None) for c in batch.completions])
            elif name == "len":
                lengths = batch.response_mask.sum(1).long().tolist()
                raw[name] = torch.tensor([linear_length_score(n, a.len_min, a.len_max) for n in lengths])
            elif name in ("ent", "em_ent"):  # the same raw mean entropy; SIGNS tells them apart
                raw[name] = entropy
            elif name == "ppl":
                raw[name] = self.reasoning_log_perplexity(batch)
            else:
                raw[name] = self.preference.score(batch.prompts, batch.completions)
        if was_training:
            self.actor.train()
        return {k: v.float().cpu() for k, v in raw.items()}, hidden

    def reasoning_log_perplexity(self, batch) -> torch.Tensor:
        """NOVER's log P_r per row: mean NLL of the reference answer after the reasoning, / N(|t|).

        On the sampling pass's KV cache where it kept one (batch.signals.prefixes), the same NLL within float
        tolerance; the cache is dropped afterwards (it is not needed again, and the update wants the memory)."""
        p, a = batch.prompt_len, self.settings
        examples = [nover_example(self.tokenizer, batch.input_ids[i, :p][batch.attention_mask[i, :p].bool()].tolist(),
                                  completion, sample.get(a.answer_key), a.format_style)
                    for i, (completion, sample) in enumerate(zip(batch.completions, batch.samples))]
        signals = getattr(batch, "signals", None)
        prefixes = getattr(signals, "prefixes", None)
        if prefixes is not None and len(prefixes) != len(examples):
            raise ValueError(f"batch.signals.prefixes has {len(prefixes)} rows for {len(examples)} responses: code "
                             "that changes a Rollout's rows must change its signals too (SamplingSignals.select)")
        nll = cached_reference_nll(self.actor, [c for c, _, _ in examples], [g for _, g, _ in examples], prefixes,
                                   self.tokenizer.pad_token_id, self.actor.device, a.per_device_train_micro_batch_size)
        if prefixes is not None:
            signals.prefixes = None
        return nll / torch.tensor([nover_length_factor(t) for _, _, t in examples])


def normalise(raw: dict, group_ids: torch.Tensor) -> dict:
    """Each reward on [0, 1], higher better: ppl / ent / em_ent / pref signed and rank-normalised within each group."""
    return {k: group_rank_normalize(SIGNS[k] * v, group_ids) if k in SIGNS else v for k, v in raw.items()}


def group_rank_normalize(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Rank of each value within its group, scaled to [0, 1] (lowest 0, highest 1; ties share their mean rank).

    MAESTRO puts rewards with arbitrary scales (perplexity, entropy, a reward model's logit) on one [0, 1] scale
    before mixing them. A group of one, or a constant group, gets 0.5; NaN (abstained) stays NaN and is not ranked.
    Tensor[N] -> Tensor[N] float32.
    """
    if values.shape != group_ids.shape or values.dim() != 1:
        raise ValueError(f"values {tuple(values.shape)} and group_ids {tuple(group_ids.shape)} must be equal 1-D shapes")
    v = values.detach().to(torch.float64).cpu()
    out = torch.full_like(v, float("nan"))
    for g in torch.unique(group_ids.cpu()):
        idx = ((group_ids.cpu() == g) & ~torch.isnan(v)).nonzero().squeeze(1)
        if len(idx) == 0:
            continue
        x = v[idx]
        below = (x[None, :] < x[:, None]).sum(1).to(torch.float64)   # members strictly lower
        equal = (x[None, :] == x[:, None]).sum(1).to(torch.float64)  # including itself
        mean_rank = below + (equal - 1) / 2                            # 0-based, ties averaged
        out[idx] = mean_rank / (len(idx) - 1) if len(idx) > 1 else torch.full_like(x, 0.5)
    return out.to(torch.float32).to(values.device)
