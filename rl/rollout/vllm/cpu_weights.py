"""vLLM-CPU's repacked linear weights, kept in step with credo's per-step weight sync (`--vllm_cpu_weights packed`,
the default).

The repack costs about 0.3 s per sync (SmolLM2-135M) and one extra copy of the weights; the packed (oneDNN brgemm)
kernels generated 1.33x the tokens/s of plain F.linear on an AVX2-only AMD EPYC in fp32, 1.28x end to end with the
sync (benchmarks/results/vllm_cpu_weights.md, `bench_vllm_cpu_weights.py --repeats 3`, sweep paused).

At load time vLLM-CPU hands every unquantized linear layer a `cpu_linear` kernel built from a private copy of its
weight (oneDNN's blocked layout; on AMX machines in bf16/fp16, SGL's packed layout; zentorch's on Zen with
zentorch) and then deletes `layer.weight` (vllm/model_executor/layers/utils.py `dispatch_cpu_unquantized_gemm`,
called by `UnquantizedLinearMethod.process_weights_after_loading`). `model.load_weights` writes into
`layer.weight`, so a sync would fail on the first layer, and even where the weight stays (embeddings and the
tied `lm_head`: `remove_weight=False`) the packed copy would silently keep the old values.

credo's reading of "redo vLLM's weight processing after a sync" (what verl's and TRL's colocated vLLM do on GPU,
where nothing is repacked):
- at build, the dispatch keeps each layer's own `weight` Parameter (with the weight_loader attributes that
  `load_weights` needs for the fused qkv/gate_up shards) next to the packed copy: one extra copy of the linear
  weights in memory, instead of rebuilding parameters vLLM has thrown away;
- after `load_weights` has written the new values into those plain weights, `repack_synced_weights` runs each
  layer's own `quant_method.process_weights_after_loading` again, which builds a fresh packed copy (and kernel)
  from them. The tied `lm_head` shares the embedding's Parameter (vLLM's `tie_weights`), so it stays tied; its
  packed copy is rebuilt like every other layer's.
"""
import importlib

import torch

# Set on the wrapper so that preparing a second engine in the same process does not wrap twice.
KEEPS_WEIGHT_MARK = "_credo_keeps_weight"


def keep_plain_weights_when_repacking() -> None:
    """Make vLLM-CPU's GEMM dispatch keep `layer.weight` beside the packed copy (process-wide; before the build).

    `UnquantizedLinearMethod` imports the dispatch from its module at call time, so replacing the module's
    attribute reaches every linear layer built afterwards.
    """
    layer_utils = importlib.import_module("vllm.model_executor.layers.utils")
    dispatch = layer_utils.dispatch_cpu_unquantized_gemm
    if getattr(dispatch, KEEPS_WEIGHT_MARK, False):
        return

    def dispatch_keeping_weight(layer, remove_weight):
        dispatch(layer, remove_weight=False)

    setattr(dispatch_keeping_weight, KEEPS_WEIGHT_MARK, True)
    dispatch_keeping_weight.wrapped = dispatch
    layer_utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_weight


def repacked_layers(model: torch.nn.Module) -> list:
    """The unquantized layers vLLM's CPU dispatch gave a `cpu_linear` kernel (linear layers, the embedding, the LM
    head), each once (the tied LM head is its own module sharing the embedding's weight). Quantized methods and 3-D
    weights (causal-conv, MoE experts: packed in place, where a second pass would corrupt them) are left alone."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
    out = []
    for module in model.modules():
        unquantized = isinstance(getattr(module, "quant_method", None),
                                 (UnquantizedLinearMethod, UnquantizedEmbeddingMethod))
        if (hasattr(module, "cpu_linear") and unquantized
                and isinstance(getattr(module, "weight", None), torch.Tensor) and module.weight.ndim != 3):
            out.append(module)
    return out


def repack_synced_weights(model: torch.nn.Module) -> int:
    """Rebuild each repacked layer's kernel from its (just synced) plain weight. Returns how many were rebuilt.

    Raises:
        RuntimeError: a layer has no plain weight left (the engine was built without
            `keep_plain_weights_when_repacking`): its kernel would go on serving the old packed weights.
    """
    layers = repacked_layers(model)
    for module in layers:
        if module.weight.ndim != 2 or module.weight.numel() == 0:
            raise RuntimeError(f"vLLM-CPU layer {type(module).__name__} lost its plain weight when it was repacked: "
                               "build the engine after rl.rollout.vllm.cpu_weights.keep_plain_weights_when_repacking()")
    for module in layers:
        module.quant_method.process_weights_after_loading(module)
    return len(layers)
