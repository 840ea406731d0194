"""Samplers: what generates a turn's tokens for a batch of contexts. One is built per run (`make_sampler`, from
--rollout_backend, --decode_loop and the actor --enable_hybrid_engine gave) and handed to whoever generates: the
episode driver (rl/rollout/episodes.py), TCPO's counterfactuals (rl/methods/tcpo_counterfactuals.py), eval.py.

- DecodeLoopSampler (--decode_loop credo, the default): rl/rollout/decode.py on the actor, ZeRO-3 parameters gathered once.
- HFGenerateSampler (--decode_loop hf_generate): transformers' `generate` on the same gathered actor.
- HybridEngineSampler: DeepSpeed's hybrid engine (its inference kernels, CUDA only), through HF `generate`.
- VLLMSampler (--rollout_backend vllm): a colocated vLLM engine (rl/rollout/vllm/backend.py) fed the actor's weights; the
  only one that also returns the sampler's own log-probs (for TIS and the mismatch metrics).

`generate_with_signals` also returns what the decode loop recorded per drawn token (rl/rollout/sampling_signals.py: log-probs,
entropy, the last hidden state) for TCPO's surprisal and MAESTRO's `ent`; the other samplers record none.

The interface takes token lists, not a padded batch: a multi-turn context is a list of tokens growing turn by
turn, vLLM consumes lists, and padding is a detail of the HF samplers.
"""
import argparse
import time
from dataclasses import dataclass

from rl.engine import dist
from rl.rollout.decode import ATTENTIONS, sample_batch_with_signals
from rl.engine.actor import generation_model, hybrid_engine_active, hybrid_engine_inference
from rl.engine.packed_linear import PackedLinears, available as packed_available
from rl.rollout.tokens import eos_ids, left_pad, response_mask_from_ids

DECODE_LOOPS = ("credo", "hf_generate")  # --decode_loop (train.py and eval.py)


@dataclass(frozen=True)
class SamplingSettings:
    """How a turn is sampled: --max_answer_seq_len, --temperature (0 = greedy, evaluation), --top_k (0 = off),
    --top_p, --cpu_packed_weights (the actor's linears on prepacked weights while it generates on a CPU) and
    --decode_attention (credo's decode loop's one-token attention)."""
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    packed_weights: bool = False
    decode_attention: str = "one_query"

    @classmethod
    def from_args(cls, args) -> "SamplingSettings":
        # --cpu_packed_weights given: packed (either decode loop); --no-cpu_packed_weights: not; neither (auto): packed
        # for credo's decode loop only, so that `--decode_loop hf_generate` stays the plain reference. The sampler
        # packs only a model that can be (rl/engine/packed_linear.available: CPU tensors in fp32 or bf16).
        given = getattr(args, "cpu_packed_weights", None)
        packed = given if given is not None else getattr(args, "decode_loop", "credo") == "credo"
        return cls(args.max_answer_seq_len, args.temperature, args.top_k, args.top_p, packed,
                   getattr(args, "decode_attention", "one_query"))


@dataclass(frozen=True)
class SamplerSettings:
    """Which sampler generates and what it needs: --rollout_backend, --decode_loop, --dtype (the weights vLLM loads),
    the sampling itself, and vLLM's own settings when it is the backend."""
    sampling: SamplingSettings
    backend: str = "hf"         # --rollout_backend: hf (the actor generates) or vllm
    decode_loop: str = "credo"  # --decode_loop: credo (rl/rollout/decode.py) or hf_generate
    dtype: str = "fp32"         # --dtype
    vllm: object = None         # rl.rollout.vllm.backend.VLLMSettings, with --rollout_backend vllm only

    @classmethod
    def from_args(cls, args) -> "SamplerSettings":
        """eval.py's parser has no --rollout_backend or --dtype choice of its own for every use: the defaults fill in."""
        backend = getattr(args, "rollout_backend", "hf")
        vllm = None
        if backend == "vllm":
            from rl.rollout.vllm.backend import VLLMSettings  # vLLM's module only when it is asked for
            vllm = VLLMSettings.from_args(args)
        return cls(SamplingSettings.from_args(args), backend, getattr(args, "decode_loop", "credo"),
                   getattr(args, "dtype", "fp32"), vllm)


def engine_lockstep(engine) -> bool:
    """True when every rank must make the same generate/forward calls: a DeepSpeed engine (ZeRO-3 gathers
    parameters collectively) on several ranks. A plain module (eval.py, even under the launcher) never waits."""
    return hasattr(engine, "module") and dist.world_size() > 1


class Sampler:
    """Generates one turn for B contexts with the actor's current weights.

    Attributes read by the callers: `eos_ids` (the ids that end a turn), `device` (where the batch is laid out),
    `lockstep` (every rank must call `generate` the same number of times, even with no contexts).
    """

    def __init__(self, engine, tokenizer, settings: SamplingSettings):
        self.engine, self.settings = engine, settings
        self.pad_token_id = tokenizer.pad_token_id
        self.eos_ids = eos_ids(tokenizer, getattr(engine, "module", engine))
        self.device = engine.device
        self.lockstep = engine_lockstep(engine)

    def generate(self, contexts: list, timings: dict) -> tuple:
        """One sampled continuation per context (adds its seconds to timings["gather"] and timings["generate"]).

        Args:
            contexts: B token lists (prompt and history so far); [] on a rank whose trajectories all ended.
        Returns:
            (B token lists, each through its first EOS or cut at max_new_tokens,
             B lists of the sampler's log-probs of those tokens, or None where the sampler gives none)
        """
        raise NotImplementedError

    def generate_with_signals(self, contexts: list, timings: dict, signals=frozenset()) -> tuple:
        """`generate`, also returning B rl.rollout.sampling_signals.TurnSignals (`signals` of "logp", "entropy", "hidden"),
        or None where this sampler records none (then a consumer does its own forward): (tokens, logps, signals)."""
        tokens, logps = self.generate(contexts, timings)
        return tokens, logps, None

    def sync_weights(self) -> None:
        """Bring the sampler's weights up to the actor's (a no-op where the sampler is the actor itself)."""

    def sleep(self) -> None:
        """Free the sampler's memory while the actor trains (a no-op where there is nothing of its own)."""

    def wake(self) -> None:
        """Be ready to generate (`generate` wakes by itself; this is for callers that want it done ahead)."""


class _ActorSampler(Sampler):
    """Generation on the actor: one batched call over every context, inside a context that gives full weights
    (on prepacked copies of its linears' weights with --cpu_packed_weights: rl/engine/packed_linear.py)."""

    def __init__(self, engine, tokenizer, settings: SamplingSettings):
        super().__init__(engine, tokenizer, settings)
        self.packs = PackedLinears() if settings.packed_weights else None

    def generation_context(self):
        return generation_model(self.engine)

    def decode(self, model, ids, mask, signals=frozenset()) -> tuple:
        """(B token lists, B TurnSignals or None)."""
        raise NotImplementedError

    def generate(self, contexts: list, timings: dict) -> tuple:
        return self.generate_with_signals(contexts, timings)[:2]

    def generate_with_signals(self, contexts: list, timings: dict, signals=frozenset()) -> tuple:
        idle = not contexts
        if idle:
            if not self.lockstep:
                return [], None
            # Nothing live on this rank, but the others generate, and under ZeRO-3 generation is collective (the
            # parameter gather; with --decode_loop hf_generate also HF's synced_gpus loop): join with a dummy.
            contexts = [[self.pad_token_id]]
        ids, mask = left_pad(contexts, self.pad_token_id, self.device)
        t0 = time.perf_counter()
        with self.generation_context() as model:
            t1 = time.perf_counter()
            was_training = model.training
            model.eval()
            if self.packs is not None and packed_available(model):  # --cpu_packed_weights
                with self.packs.applied(model, rows=len(contexts), step=getattr(self.engine, "global_steps", None)):
                    responses, recorded = self.decode(model, ids, mask, signals)
            else:
                responses, recorded = self.decode(model, ids, mask, signals)
            model.train(was_training)
            t2 = time.perf_counter()
        timings["gather"] = timings.get("gather", 0.0) + (t1 - t0) + (time.perf_counter() - t2)
        timings["generate"] = timings.get("generate", 0.0) + (t2 - t1)
        return ([] if idle else responses), None, ([] if idle and recorded is not None else recorded)


class DecodeLoopSampler(_ActorSampler):
    """rl/rollout/decode.py: finished rows leave the batch, inverse-CDF sampling with HF's warpers."""

    def decode(self, model, ids, mask, signals=frozenset()) -> tuple:
        s = self.settings
        # temperature 0 = greedy (evaluation); training always samples (--temperature > 0 is enforced)
        return sample_batch_with_signals(model, ids, mask, s.max_new_tokens, self.eos_ids, s.temperature,
                                         top_k=s.top_k or None, top_p=s.top_p, signals=signals,
                                         attention=s.decode_attention)


class HFGenerateSampler(_ActorSampler):
    """transformers' `generate` with a KV cache; under lockstep HF's synced_gpus loop keeps the ranks together."""

    def decode(self, model, ids, mask, signals=frozenset()) -> tuple:
        s = self.settings
        sampling = dict(do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or None) \
            if s.temperature > 0 else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        sequences = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=s.max_new_tokens,
                                   pad_token_id=self.pad_token_id, eos_token_id=self.eos_ids, use_cache=True,
                                   synced_gpus=self.lockstep, **sampling)
        new = sequences[:, ids.shape[1]:]
        keep = response_mask_from_ids(new, self.eos_ids).sum(-1).long().tolist()
        return [new[i, :keep[i]].tolist() for i in range(len(ids))], None  # no signals: consumers do a forward


class HybridEngineSampler(HFGenerateSampler):
    """DeepSpeed's hybrid engine: its `generate` runs the inference kernels (the decode loop cannot use them)."""

    def generation_context(self):
        return hybrid_engine_inference(self.engine)


class VLLMSampler(Sampler):
    """A colocated vLLM engine (`rl.rollout.vllm.backend.VLLMRollout`): weights synced from the actor when stale, asleep
    while the actor trains."""

    def __init__(self, backend, engine, tokenizer, settings: SamplingSettings):
        super().__init__(engine, tokenizer, settings)
        self.backend = backend

    def generate(self, contexts: list, timings: dict) -> tuple:
        t0, synced_before = time.perf_counter(), self.backend.sync_seconds
        tokens, logps = self.backend.generate(contexts, self.eos_ids)
        sync = self.backend.sync_seconds - synced_before  # weight loading counts as "gather", as on the HF path
        timings["gather"] = timings.get("gather", 0.0) + sync
        timings["generate"] = timings.get("generate", 0.0) + time.perf_counter() - t0 - sync
        return tokens, logps

    def sync_weights(self) -> None:
        self.backend.sync_weights()

    def sleep(self) -> None:
        self.backend.sleep()

    def wake(self) -> None:
        self.backend.wake()


def sampler_class(settings: SamplerSettings, engine) -> type:
    """The sampler the flags and the built actor call for (--rollout_backend, --enable_hybrid_engine, --decode_loop).

    The hybrid engine is asked of the actor itself: build_actor falls back to a plain engine (with a warning) where
    DeepSpeed cannot serve the model, and the decode loop then applies.
    """
    if settings.backend == "vllm":
        return VLLMSampler
    if hybrid_engine_active(engine):
        return HybridEngineSampler
    return DecodeLoopSampler if settings.decode_loop == "credo" else HFGenerateSampler


def make_sampler(settings: SamplerSettings, engine, tokenizer) -> Sampler:
    """The run's sampler for `engine` (a DeepSpeed actor, or a plain HF model in eval.py and tests)."""
    cls = sampler_class(settings, engine)
    if cls is VLLMSampler:
        from rl.engine.actor import resolve_dtype
        from rl.rollout.vllm.backend import VLLMRollout
        return VLLMSampler(VLLMRollout(settings.vllm, engine, resolve_dtype(settings.dtype)), engine, tokenizer,
                           settings.sampling)
    return cls(engine, tokenizer, settings.sampling)


def add_sampling_flags(p):
    """The rollout's batch and sampling flags."""
    g = p.add_argument_group("rollout: batch and sampling")
    g.add_argument("--num_generations", type=int, default=4, help="group size G: responses sampled per prompt")
    g.add_argument("--per_device_generation_batch_size", type=int, default=8, help="prompts per rank per step")
    g.add_argument("--max_prompt_seq_len", type=int, default=None,
                   help="prompts longer than this are left-truncated; default: the env's (toolcall 4096), else 256 "
                        "(DeepSpeed-Chat's)")
    g.add_argument("--max_answer_seq_len", type=int, default=None,
                   help="max new tokens per response (per turn); default: the env's (arith, arith_multi, mixed 32; "
                        "math, code, appworld 512); the share cut at this length is `trunc` on the console line")
    g.add_argument("--temperature", type=float, default=0.7, help="sampling temperature for rollouts")
    g.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling for rollouts")
    g.add_argument("--top_k", type=int, default=0, help="top-k sampling for rollouts (0 = off)")
    g.add_argument("--decode_loop", choices=DECODE_LOOPS, default="credo",
                   help="with --rollout_backend hf: credo = rl/rollout/decode.py (drops finished responses from the batch, "
                        "HF's logits warpers, inverse-CDF sampling; 1.5x faster on the CPU default: "
                        "benchmarks/results/decode_loop.md); hf_generate = transformers' model.generate. The hybrid "
                        "engine always uses its own generate")
    g.add_argument("--cpu_packed_weights", action=argparse.BooleanOptionalAction, default=None,
                   help="with --rollout_backend hf on a CPU: while the actor generates, its linear layers run on "
                        "copies of their weights prepacked for oneDNN (as vLLM-CPU does), repacked after each update: "
                        "1.35x faster decoding of the CPU default model in fp32 and 1.34x in bf16, greedy tokens "
                        "unchanged, log-probs a little further from the training forward's "
                        "(benchmarks/results/rollout_engines.md); one extra copy of the weights "
                        "(rl/engine/packed_linear.py). Default: on for --decode_loop credo (the main job's A/B: "
                        "benchmarks/results/main_job_ab_attention.md), off for hf_generate, the plain reference; "
                        "--no-cpu_packed_weights turns it off")
    g.add_argument("--decode_attention", choices=ATTENTIONS, default="one_query",
                   help="with --decode_loop credo, a bf16/fp16 model on a CPU: one_query = each one-token step attends "
                        "in fp32 by two matmuls over the grouped heads (rl/engine/decode_attention.py), because torch's "
                        "CPU SDPA kernel is slow at that shape (2.9 vs 0.65 ms a call in bf16 vs fp32, "
                        "benchmarks/results/rollout_engines.md); sdpa = the model's own attention, as the training "
                        "forward uses. Prefill, fp32 models, GPUs and the training forward always keep the model's own")
    g.add_argument("--rollout_backend", choices=("hf", "vllm"), default="hf",
                   help="hf: the actor generates (ZeRO-3 gathered once, HF generate; or --enable_hybrid_engine); "
                        "vllm: a vLLM engine colocated in each rank, sleeping while the actor trains and loaded with "
                        "its weights after every update (CUDA and requirements-gpu.txt)")


def validate_sampling(args, bad):
    if args.num_generations < 2:
        bad(f"--num_generations {args.num_generations}: {args.algo} needs at least 2 responses per prompt")
    for flag in ("per_device_generation_batch_size", "max_answer_seq_len", "max_prompt_seq_len"):
        if getattr(args, flag) < 1:
            bad(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.temperature <= 0:
        bad(f"--temperature must be > 0 for sampled rollouts, got {args.temperature}")
    if args.cpu_packed_weights and args.rollout_backend == "vllm":  # given; the default (None) is not refused
        bad("--cpu_packed_weights packs the actor's weights for its own decoding (--rollout_backend hf); vLLM-CPU packs "
            "its own copy: see --vllm_cpu_weights")
    if not 0 < args.top_p <= 1:
        bad(f"--top_p must be in (0, 1], got {args.top_p}")
