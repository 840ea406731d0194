"""Micro-benchmark of the LM-head log-prob computation of one update (forward + backward), the part of credo's
train phase that scales with the vocabulary (SmolLM2: 49,152 x 576, tied embeddings).

Variants, on hidden states of shape [B, R + 1, H] (B = 32 responses, R = 48 tokens), fp32:
  credo:            rl.update.batching.response_logprobs' head: full logits, / T, gather - logsumexp, plus the no-grad
                    entropy (rewards.lm_tensors.entropy_from_logits), as the trainer runs it;
  credo-no-entropy: the same without the entropy;
  log_softmax:      log_softmax(logits / T).gather (one fused normalisation);
  trl-chunked:      TRL 1.16's ChunkedLogProbFunction (logits never materialised, recomputed in backward), with
                    entropy; on CPU TRL feeds it every position, prompt included (`--trl_prompt_len` adds those).

    .venv/bin/python benchmarks/bench_logprob_head.py --repeats 3
"""
import argparse
import os
import statistics
import time

import torch

from rewards.lm_tensors import entropy_from_logits

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def credo_head(h, w, targets, t, entropy=True):
    logits = (h @ w.T).float() / t
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    if entropy:
        with torch.no_grad():
            entropy_from_logits(logits)
    return logp


def log_softmax_head(h, w, targets, t):
    return torch.log_softmax((h @ w.T) / t, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def trl_head(h, w, targets, t):
    from trl.kernels import ChunkedLogProbFunction
    flat = h.reshape(-1, h.shape[-1])
    out = ChunkedLogProbFunction.apply(flat, w, None, targets.reshape(-1), t, 32768, None, 1.0,
                                       ("log_probs", "entropy"))
    return out[0].view(targets.shape)


def timed(fn, h, w, targets, t, repeats):
    """Median wall seconds and median process CPU seconds (all threads; steadier on a shared machine)."""
    wall, cpu = [], []
    for i in range(repeats + 1):
        hh = h.detach().requires_grad_(True)
        ww = w.detach().requires_grad_(True)
        t0, c0 = time.perf_counter(), time.process_time()
        logp = fn(hh, ww, targets, t)
        logp.sum().backward()
        if i:  # the first call is warm-up
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return f"wall {statistics.median(wall):.3f} s, cpu {statistics.median(cpu):.3f} s"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--resp_len", type=int, default=48)
    p.add_argument("--trl_prompt_len", type=int, default=40, help="prompt positions TRL also scores on CPU")
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--hidden", type=int, default=576)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    w = torch.randn(a.vocab, a.hidden) * 0.02
    h = torch.randn(a.batch, a.resp_len + 1, a.hidden)
    targets = torch.randint(0, a.vocab, (a.batch, a.resp_len + 1))
    h_trl = torch.randn(a.batch, a.resp_len + a.trl_prompt_len, a.hidden)
    targets_trl = torch.randint(0, a.vocab, (a.batch, a.resp_len + a.trl_prompt_len))
    variants = {
        "credo": lambda *x: credo_head(*x, entropy=True),
        "credo-no-entropy": lambda *x: credo_head(*x, entropy=False),
        "log_softmax": log_softmax_head,
    }
    print(f"{a.batch} x {a.resp_len + 1} positions, vocab {a.vocab}, hidden {a.hidden}, {a.threads} threads; "
          f"median of {a.repeats} forward+backward passes")
    for name, fn in variants.items():
        print(f"{name:18s} {timed(fn, h, w, targets, a.temperature, a.repeats)}", flush=True)
    try:
        print(f"{'trl-chunked':18s} {timed(trl_head, h, w, targets, a.temperature, a.repeats)} "
              f"(response positions only)", flush=True)
        print(f"{'trl-chunked+prompt':18s} {timed(trl_head, h_trl, w, targets_trl, a.temperature, a.repeats)} "
              f"({a.resp_len + a.trl_prompt_len} positions, as TRL runs on CPU)", flush=True)
    except ImportError:
        print("trl not installed: pip install -r requirements-bench.txt")


if __name__ == "__main__":
    main()
