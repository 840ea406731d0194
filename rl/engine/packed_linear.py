"""CPU generation on prepacked weights (--cpu_packed_weights): while the actor generates, every nn.Linear runs on a copy
of its weight reordered once into oneDNN's blocked layout (torch.ops.mkldnn._reorder_linear_weight, then
_linear_pointwise: the pair inductor's freezing pass emits, and the path vLLM-CPU dispatches fp32 and bf16 linears to
on CPUs without AMX, vllm/model_executor/layers/utils.py `dispatch_cpu_unquantized_gemm`).

Why: a decode step multiplies a few rows by every weight matrix, and the plain kernel re-reads each weight in its
row-major layout every step; the blocked copy is read faster. Measured by benchmarks/bench_rollout_engines.py
(benchmarks/results/rollout_engines.md: CPU default model, 2-core AMD EPYC with AVX-512 BF16, 32 rows x 48 tokens,
EOS ignored): 1.35x credo's loop on the plain weights in fp32 (274.8 vs 203.2 tokens/s), 1.34x in bf16 (393.3 vs
292.6; before rl/engine/decode_attention.py, SDPA's 38% of a bf16 step hid it: 1.02x). On by default for credo's
decode loop (--no-cpu_packed_weights turns it off).
Greedy tokens are unchanged (tests/engine/test_packed_linear.py). Not bit-identical: oneDNN accumulates in another
order, so the recorded log-probs move a little further from the training forward's (fp32 max |diff| 5.3e-5 against
3.8e-5 on the plain weights, same benchmark; the rollout/ mismatch metrics show it in training).

Cost: one extra copy of the weights, and a reorder (~0.3 s for SmolLM2-135M) of every weight at the first
generation after each optimizer step (PackedLinears says when).
"""
import contextlib

import torch


def available(model) -> bool:
    """Whether this build and this model's parameters can use the packed path (CPU tensors, fp32 or bf16, oneDNN)."""
    param = next(model.parameters(), None)
    return (param is not None and param.device.type == "cpu" and param.dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available())


class PackedLinears:
    """The packed copies of one model's Linear weights, kept across the calls of one step (multi-turn turns, TCPO's
    counterfactuals, validation) and re-packed where a weight may have changed: a new optimizer step (the engine's
    global_steps; an update through `param.data.copy_`, as DeepSpeed's mixed-precision optimizers write the bf16
    weights, bumps no tensor version), a new in-place version (a plain optimizer), or new storage (a ZeRO-3 gather)."""

    def __init__(self):
        self.packed = {}  # the Linear module -> ((data_ptr, _version, step), packed weight)

    def weight_for(self, linear: torch.nn.Linear, rows: int, step=None) -> torch.Tensor:
        w = linear.weight
        key = (w.data_ptr(), w._version, step)
        entry = self.packed.get(linear)
        if entry is None or entry[0] != key:
            entry = self.packed[linear] = (key, torch.ops.mkldnn._reorder_linear_weight(w.detach(), rows))
        return entry[1]

    @contextlib.contextmanager
    def applied(self, model, rows: int, step=None):
        """Every nn.Linear of `model` forwards through its packed weight inside the block, as it was after it.
        rows: the batch size the reorder is tuned for (any row count works); step: the optimizer steps taken so far
        (a DeepSpeed engine's global_steps; None for a model that does not train)."""
        linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
        with torch.no_grad():
            for linear in linears:
                linear.forward = _packed_forward(linear, self.weight_for(linear, rows, step))
        try:
            yield model
        finally:
            for linear in linears:
                del linear.forward  # the class's forward again
            present = set(linears)
            self.packed = {m: e for m, e in self.packed.items() if m in present}  # drop modules now gone


def _packed_forward(linear: torch.nn.Linear, packed: torch.Tensor):
    bias = linear.bias

    def forward(x):
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return forward
