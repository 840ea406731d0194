"""The rollout correction: the gap between the trainer's log-probs and the sampler's on the tokens vLLM sampled,
and truncated importance sampling's factors on the loss (--vllm_is_correction tis; rl/update/loss.py's
truncated_is_weights). The HF sampler computes the trainer's own log-probs, so it has nothing to correct."""
import torch

from rl.engine import dist
from rl.update.loss import truncated_is_weights


class SamplerMismatch:
    """One step's tally of |logp_trainer - logp_sampler| on vLLM-sampled tokens, and the TIS factors of the loss.

    `weights` is called once per micro-batch; `metrics` (a collective: every rank calls it) gives
    rollout/logp_diff_max, rollout/logp_diff_mean and rollout/tis_capped_frac over all ranks' tokens, or {} when
    nothing was sampled by vLLM.
    """

    def __init__(self, correction: str, cap: float):
        self.correction, self.cap = correction, cap
        self.seen = False
        self.max_gap = 0.0
        self.sums = torch.zeros(3, dtype=torch.float64)  # sum of gaps, capped tokens, tokens

    def weights(self, old_logp, rollout_logp, mask):
        """Tensor[B, T] loss factors under --vllm_is_correction tis, else None (the gap is measured either way)."""
        if rollout_logp is None:
            return None
        self.seen = True
        mask = mask.to(torch.float32)
        gap = (old_logp.detach().float() - rollout_logp.float()).abs() * mask
        w = truncated_is_weights(old_logp, rollout_logp, self.cap)
        self.max_gap = max(self.max_gap, gap.max().item())
        self.sums += torch.tensor([gap.sum().item(), ((w >= self.cap) * mask).sum().item(), mask.sum().item()],
                                  dtype=torch.float64)
        return w if self.correction == "tis" else None

    def metrics(self) -> dict:
        if not self.seen:
            return {}
        sums = dist.all_reduce(self.sums)
        tokens = max(sums[2].item(), 1.0)
        return {"rollout/logp_diff_max": dist.all_reduce(torch.tensor([self.max_gap]), op="max").item(),
                "rollout/logp_diff_mean": sums[0].item() / tokens,
                "rollout/tis_capped_frac": sums[1].item() / tokens}


def add_rollout_correction_flags(p):
    """The rollout correction's flags."""
    g = p.add_argument_group("update: rollout correction (vLLM)")
    g.add_argument("--vllm_is_correction", choices=("none", "tis"), default="none",
                   help="tis: truncated importance sampling, each token's loss x min(exp(logp_trainer - logp_vllm), "
                        "--vllm_is_cap), for the mismatch between vLLM's and the trainer's log-probs")
    g.add_argument("--vllm_is_cap", type=float, default=2.0, help="TIS weight cap C (verl's rollout_is_threshold: 2)")
