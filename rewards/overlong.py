"""DAPO's soft overlong punishment, as a pure tensor function. (Which rows ran out of the budget, for the
truncated-completion mask and the truncated_frac metric, is rl.types.truncated_rows.)

Soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, section 3.4, eq. 13), with L_max = --max_answer_seq_len
and L_cache = --overlong_buffer_len:
    R_length(y) = 0                                  if |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
                = -1                                 if |y| > L_max
added to the response's reward. verl's DAPO reward manager (verl/workers/reward_manager/dapo.py) scales it by
`overlong_buffer.penalty_factor` (--overlong_penalty_factor) and computes min(-exceed / L_cache * factor, 0), which
is the same line. A response here never exceeds L_max (generation stops there), so the third branch only bounds it.
"""
import torch


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float = 1.0) -> torch.Tensor:
    """The reward added to each response for its length (<= 0).

    Args:
        lengths: Tensor[N] generated tokens per response, its EOS included (verl's valid_response_length).
        max_len: L_max, the generation budget; buffer_len: L_cache (> 0, <= max_len); factor: the scale (>= 0).
    Returns:
        Tensor[N] float32: 0 up to max_len - buffer_len tokens, then linear down to -factor at max_len tokens,
        -factor beyond.
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"overlong buffer_len must be in (0, max_len={max_len}], got {buffer_len}")
    exceed = lengths.float() - (max_len - buffer_len)
    return (-exceed / buffer_len).clamp(min=-1.0, max=0.0) * factor
