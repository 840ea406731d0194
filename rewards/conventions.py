"""The two reward-function conventions credo accepts, told apart by signature when the function is loaded.

- credo's: `fn(prompt, completion, sample) -> float | dict[str, float | None] | None`, one call per completion.
- TRL's (GRPOTrainer): `f(prompts, completions, **kwargs) -> list[float | None]`, batched. As TRL does, the
  keyword arguments are `prompts`, `completions`, `completion_ids` and one list per dataset column (every key of
  the rows but `prompt`, `completion`, `completion_ids`), plus `trainer_state`. None in the list abstains.
credo's reading where TRL has no equivalent: `prompts` are the first user message as text (TRL's "standard"
format; credo renders chat itself), and `trainer_state` is a small stand-in with `global_step` and `max_steps`
(the only fields TRL rewards commonly read), not a transformers TrainerState.
"""
import inspect
from types import SimpleNamespace

CREDO, TRL = "credo", "trl"
TRL_EXCLUDED_COLUMNS = ("prompt", "completion", "completion_ids")  # TRL does not pass these columns as kwargs


def reward_style(fn, spec: str) -> str:
    """CREDO or TRL for a reward callable; ValueError naming `spec` and the signature when it is neither."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without introspectable parameters: trust it
        return CREDO
    params = signature.parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = getattr(fn, "__qualname__", type(fn).__name__)
    if "completions" in params:  # TRL names its arguments; credo's convention has `completion`
        if not takes_kwargs:
            raise ValueError(f"{spec}: {named}{signature} looks like a TRL reward but has no **kwargs; TRL passes "
                             f"every dataset column as a keyword argument: f(prompts, completions, **kwargs)")
        try:
            # partial: its other named parameters are dataset columns, known only when it is called
            signature.bind_partial(prompts=[], completions=[], completion_ids=[], trainer_state=None)
        except TypeError as exc:
            raise ValueError(f"{spec}: {named}{signature} looks like a TRL reward but cannot take TRL's keyword "
                             f"arguments ({exc}); TRL's convention is f(prompts, completions, **kwargs)") from None
        return TRL
    try:
        signature.bind("prompt", "completion", {})
    except TypeError:
        raise ValueError(f"{spec}: {named}{signature} is neither credo's fn(prompt, completion, sample) nor TRL's "
                         f"f(prompts, completions, **kwargs) -> list[float | None]") from None
    return CREDO


def trl_kwargs(prompts: list, completions: list, completion_ids: list, samples: list, step: int, max_steps: int):
    """The keyword arguments TRL's GRPOTrainer gives a reward function for these completions."""
    columns = [k for k in (samples[0] if samples else {}) if k not in TRL_EXCLUDED_COLUMNS]
    kwargs = {key: [sample.get(key) for sample in samples] for key in columns}
    kwargs.update(prompts=list(prompts), completions=list(completions), completion_ids=list(completion_ids),
                  trainer_state=SimpleNamespace(global_step=step, max_steps=max_steps))
    return kwargs


def chunks(n: int, parts: int) -> list:
    """[(start, stop)] splitting range(n) into at most `parts` contiguous, near-equal pieces."""
    parts = max(1, min(parts, n))
    size, extra = divmod(n, parts)
    bounds, start = [], 0
    for k in range(parts):
        stop = start + size + (k < extra)
        bounds.append((start, stop))
        start = stop
    return bounds
