"""vLLM-CPU generation with its repacked (oneDNN) weights vs plain weights, weight sync and repack included.

What one RL step of `--rollout_backend vllm` costs on CPU: sync the actor's (changed) weights, then generate the
32 prompts of one bench_vs_trl step (8 single-digit arith prompts x 4), 48 new tokens each (EOS ignored, so both
modes generate the same count), temperature 0.7, the CPU default model in fp32. One engine serves both modes, so
that they share the process, the KV cache and the machine's load: "packed" is vLLM-CPU's own dispatch (oneDNN
kernels built from packed copies, rebuilt after each sync by rl/rollout/vllm/cpu_weights.py); "plain" swaps every layer's
kernel for torch's F.linear on the plain weight, which is exactly the fallback `--vllm_cpu_weights plain` builds.
Modes alternate repeat by repeat. Each repeat perturbs the actor first, so every sync writes changed weights. Both
wall time and the process's CPU time are recorded: on a shared machine (other jobs at a higher priority) wall time
mostly measures the scheduler, while CPU seconds per token measure the work each mode does. The result files are
rewritten after every counted repeat. Results: benchmarks/results/vllm_cpu_weights.{json,md}.

    OMP_NUM_THREADS=2 .venv-vllm/bin/python -m benchmarks.bench_vllm_cpu_weights --repeats 4
"""
import argparse
import os
import shlex
import statistics
import sys
import time
from types import SimpleNamespace

import torch

from benchmarks.bench_envs import single_digit_rows
from benchmarks.bench_vs_trl import GROUP, MAX_NEW, MODEL, PROMPTS, TEMPERATURE, machine_info
from benchmarks.ports import free_port
from benchmarks.results_io import write_results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("packed", "plain")


def plain_kernels(layers):
    """Point every repacked layer at F.linear on its plain weight (what vLLM's fallback dispatch builds)."""
    for layer in layers:
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)


def perturb(model, seed):
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.add_(1e-3 * p.abs().mean() * torch.randn(p.shape, generator=generator))


def report(r) -> str:
    m = r["machine"]
    lines = ["# vLLM-CPU: repacked (oneDNN) vs plain weights, weight sync included", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, bf16 matmul ISA: {m['bf16_isa'] or 'none'}; load average "
             f"{r['loadavg_start'][0]:.2f} at start, {r['loadavg_end'][0]:.2f} at end; vllm-cpu {r['vllm']}, "
             f"torch {m['torch']}, {r['threads']} threads.",
             f"Workload: {r['prompts']} prompts x {r['max_new']} new tokens, temperature {r['temperature']}, "
             f"{os.path.basename(r['model'])} fp32, {r['counted']} counted repeats per mode (one warm-up), "
             "alternating; every repeat perturbs the actor, syncs, then generates.",
             f"Command: `{r['command']}`", "",
             "| mode | generate tokens/s (median, wall) | generate tokens per CPU-second | sync s (wall) | of which "
             "repack s | sync CPU-s | end-to-end tokens per CPU-second (sync + generate) | end-to-end tokens/s "
             "(wall) |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        s = r["summary"][mode]
        lines.append(f"| {mode} | {s['gen_tokens_per_s']:.1f} | {s['gen_tokens_per_cpu_s']:.1f} | {s['sync_s']:.3f} | "
                     f"{s['repack_s']:.3f} | {s['sync_cpu_s']:.3f} | {s['end_to_end_tokens_per_cpu_s']:.1f} | "
                     f"{s['end_to_end_tokens_per_s']:.1f} |")
    verdict = "pays off" if r["speedup_end_to_end_cpu"] > 1.0 else "does not pay off"
    lines += ["", f"Packed / plain, end to end: **{r['speedup_end_to_end_cpu']:.2f}x** in CPU time "
              f"({r['speedup_end_to_end']:.2f}x in wall time); generation alone: {r['speedup_generate_cpu']:.2f}x in "
              f"CPU time ({r['speedup_generate']:.2f}x wall). Repacking {verdict} on this machine (CPU time decides: "
              "wall time on a shared machine measures the scheduler).",
              f"Engine build (packs once at load): {r['build_s']:.1f} s. Extra memory of the packed mode: a packed "
              f"copy per layer (linear layers, embedding, LM head; {r['packed_copy_mib']:.0f} MiB here).", "",
              "Per-repeat seconds (generate, sync): " + "; ".join(
                  f"{mode}: " + ", ".join(f"({g:.2f}, {s:.2f})" for g, s in zip(r["runs"][mode]["generate_s"],
                                                                              r["runs"][mode]["sync_s"]))
                  for mode in MODES), ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=4, help="counted repeats per mode (default 4)")
    p.add_argument("--model", default=MODEL, help="HF model folder (default the converted SmolLM2-135M-Instruct)")
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "vllm_cpu_weights"))
    a = p.parse_args()
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from transformers import AutoModelForCausalLM

    from rl.engine.models import load_tokenizer
    from rl.rollout.vllm.backend import VLLMRollout, VLLMSettings, _vllm_model
    from rl.rollout.tokens import encode_prompts
    from rl.rollout.vllm.cpu_weights import repacked_layers

    machine = machine_info()
    tok = load_tokenizer(a.model)
    actor = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    rows = [r for r in single_digit_rows(PROMPTS, 0) for _ in range(GROUP)]
    ids, mask = encode_prompts(tok, [[{"role": "user", "content": r["prompt"]}] for r in rows], 256)
    contexts = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    args = argparse.Namespace(model_name_or_path=a.model, vllm_sleep_level=0, vllm_tensor_parallel_size=1,
                              temperature=TEMPERATURE, top_p=1.0, top_k=0, max_answer_seq_len=MAX_NEW,
                              vllm_max_model_len=0, max_prompt_seq_len=256, max_turns=1,
                              vllm_gpu_memory_utilization=0.3, seed=0, dist_timeout_minutes=5,
                              vllm_cpu_weights="packed")
    engine = SimpleNamespace(module=actor, global_steps=0)
    from vllm import SamplingParams
    # VLLMRollout.generate's own parameters, but EOS ignored: every context gets exactly MAX_NEW tokens.
    params = SamplingParams(n=1, temperature=TEMPERATURE, max_tokens=MAX_NEW, logprobs=0, ignore_eos=True,
                            detokenize=False)
    prompts = [{"prompt_token_ids": list(c)} for c in contexts]
    t0 = time.perf_counter()
    backend = VLLMRollout(VLLMSettings.from_args(args), engine, torch.float32)
    build_s = time.perf_counter() - t0
    layers = repacked_layers(_vllm_model(backend.llm))
    packed_copy_mib = sum(layer.weight.numel() * layer.weight.element_size() for layer in layers) / 2 ** 20

    runs = {mode: {"generate_s": [], "generate_cpu_s": [], "sync_s": [], "sync_cpu_s": [], "repack_s": [],
                   "tokens": []} for mode in MODES}
    static = {"machine": machine, "threads": torch.get_num_threads(),
              "model": a.model, "prompts": len(contexts), "max_new": MAX_NEW, "temperature": TEMPERATURE,
              "repeats": a.repeats, "build_s": build_s, "packed_copy_mib": packed_copy_mib,
              "loadavg_start": machine["loadavg_start"],
              "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} .venv-vllm/bin/python -m "
                         "benchmarks.bench_vllm_cpu_weights " + " ".join(shlex.quote(x) for x in sys.argv[1:])}
    for rep in range(a.repeats + 1):  # repeat 0 warms both modes up and is not counted
        for mode in (MODES if rep % 2 == 0 else MODES[::-1]):
            perturb(actor, rep * 10 + MODES.index(mode))
            engine.global_steps += 1
            backend.packed_cpu_weights = mode == "packed"
            sync0, repack0, cpu0 = backend.sync_seconds, backend.repack_seconds, time.process_time()
            backend.wake()  # the sync of a rollout phase (rebuilds the packed kernels in packed mode)
            if mode == "plain":
                plain_kernels(layers)
            t, cpu1 = time.perf_counter(), time.process_time()
            outputs = backend.llm.generate(prompts, sampling_params=params, use_tqdm=False)
            tokens = [out.outputs[0].token_ids for out in outputs]
            gen_s, gen_cpu_s = time.perf_counter() - t, time.process_time() - cpu1
            if rep == 0:
                continue
            run = runs[mode]
            run["generate_s"].append(gen_s)
            run["generate_cpu_s"].append(gen_cpu_s)
            run["sync_cpu_s"].append(cpu1 - cpu0)
            run["sync_s"].append(backend.sync_seconds - sync0)
            run["repack_s"].append(backend.repack_seconds - repack0)
            run["tokens"].append(sum(len(x) for x in tokens))
            print(f"[bench] repeat {rep} {mode}: generate {gen_s:.2f} s ({gen_cpu_s:.2f} CPU-s), sync "
                  f"{run['sync_s'][-1]:.2f} s (repack {run['repack_s'][-1]:.2f}; {cpu1 - cpu0:.2f} CPU-s)", flush=True)
            if all(r["tokens"] for r in runs.values()):
                save(static, runs, a.results)


def save(static, runs, results):
    import vllm
    summary = {}
    for mode, run in runs.items():
        med = statistics.median
        summary[mode] = {"gen_tokens_per_s": med(n / g for n, g in zip(run["tokens"], run["generate_s"])),
                         "gen_tokens_per_cpu_s": med(n / g for n, g in zip(run["tokens"], run["generate_cpu_s"])),
                         "sync_s": med(run["sync_s"]), "sync_cpu_s": med(run["sync_cpu_s"]),
                         "repack_s": med(run["repack_s"]),
                         "end_to_end_tokens_per_s": med(
                             n / (g + s) for n, g, s in zip(run["tokens"], run["generate_s"], run["sync_s"])),
                         "end_to_end_tokens_per_cpu_s": med(
                             n / (g + s) for n, g, s in zip(run["tokens"], run["generate_cpu_s"], run["sync_cpu_s"]))}
    ratio = lambda key: summary["packed"][key] / summary["plain"][key]  # noqa: E731
    result = {**static, "vllm": vllm.__version__, "counted": len(runs["packed"]["tokens"]),
              "loadavg_end": os.getloadavg(), "runs": runs, "summary": summary,
              "speedup_end_to_end": ratio("end_to_end_tokens_per_s"), "speedup_generate": ratio("gen_tokens_per_s"),
              "speedup_end_to_end_cpu": ratio("end_to_end_tokens_per_cpu_s"),
              "speedup_generate_cpu": ratio("gen_tokens_per_cpu_s")}
    write_results(result, results, report)


if __name__ == "__main__":
    main()
