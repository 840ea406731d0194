"""What a checkpoint costs: size and time of a full save (fp32 master weights + Adam moments, sha256 manifest,
fsync), its verification and load, and a model-only HF export, for the default model on one ZeRO-3 rank.

    python benchmarks/bench_checkpoint.py [--model_name_or_path DIR] [--results benchmarks/results/checkpoint_cost]
"""
import argparse
import os
import shutil
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


def main():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model_name_or_path", default=None, help="default: credo's default model")
    p.add_argument("--saves", type=int, default=2, help="full saves timed")
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "checkpoint_cost"))
    a = p.parse_args()
    from benchmarks.ports import free_port
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    import torch
    from rl.engine import dist
    from rl.run.checkpoint import export_hf, load_checkpoint, resolve_resume, save_checkpoint
    from rl.config import parse_args
    from rl.engine.actor import build_actor
    from rl.engine.models import load_tokenizer
    from benchmarks.results_io import cpu_model, write_results

    dist.init_distributed()
    out = tempfile.mkdtemp(prefix="bench_checkpoint_")
    args = parse_args(["--output_dir", out] + (["--model_name_or_path", a.model_name_or_path]
                                               if a.model_name_or_path else []))
    engine = build_actor(args, 1, 10)
    ids = torch.randint(0, 1000, (1, 16))
    for _ in range(engine.gradient_accumulation_steps()):  # one optimizer step: the Adam moments exist
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()
    saves = []
    for step in range(1, a.saves + 1):
        t0 = time.perf_counter()
        folder = save_checkpoint(engine, out, step, {"step": step}, save_total_limit=1)
        saves.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    point = resolve_resume("auto", out)
    point.verify()
    verify_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    load_checkpoint(engine, point.root, point.tag)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    hf_dir = os.path.join(out, "hf", "step_1")
    export_hf(engine, load_tokenizer(args.model_name_or_path), hf_dir)
    export_s = time.perf_counter() - t0
    from rl.engine.actor import resolve_dtype
    result = {"model": os.path.relpath(os.path.abspath(args.model_name_or_path), REPO),
              "dtype": str(resolve_dtype(args.dtype)).replace("torch.", ""),
              "parameters": sum(getattr(q, "ds_numel", q.numel()) for q in engine.module.parameters()),
              "full_save_bytes": folder_bytes(folder), "full_save_s": saves, "verify_s": verify_s, "load_s": load_s,
              "model_only_bytes": folder_bytes(hf_dir), "model_only_export_s": export_s,
              "cpu": cpu_model(), "torch_threads": torch.get_num_threads()}
    shutil.rmtree(out, ignore_errors=True)

    def report(r):
        gb = 1e9
        return (f"# Checkpoint cost\n\n{r['model']} ({r['parameters'] / 1e6:.1f}M parameters, {r['dtype']}), one "
                f"ZeRO-3 rank on CPU ({r['cpu']}, {r['torch_threads']} threads), measured by "
                f"`benchmarks/bench_checkpoint.py`.\n\n"
                f"| what | size | time |\n|---|---|---|\n"
                f"| full save (weights, fp32 Adam state, RNG; sha256 manifest; fsync) | "
                f"{r['full_save_bytes'] / gb:.2f} GB | {', '.join(f'{s:.1f}' for s in r['full_save_s'])} s |\n"
                f"| verify the manifest at resume | | {r['verify_s']:.1f} s |\n"
                f"| load into the engine | | {r['load_s']:.1f} s |\n"
                f"| model-only HF export (`--save_model_only_steps`) | {r['model_only_bytes'] / gb:.2f} GB | "
                f"{r['model_only_export_s']:.1f} s |\n")
    write_results(result, a.results, report)


if __name__ == "__main__":
    main()
