"""Paired statistics over seeds: the same seeds run under two methods, compared seed by seed.

Pure functions of lists of floats (numpy inside). Used by the mechanism testbeds, experiments/compare.py and the
main job's seed reports (benchmarks/main_job_seeds.py): it lives here because experiments/ builds on benchmarks/,
never the reverse (tests/config/test_layering.py).
"""
import math

import numpy as np


def mean_se(values) -> tuple:
    """(mean, standard error of the mean: sample sd / sqrt(n)); the SE is NaN for fewer than 2 values."""
    values = [float(v) for v in values]
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact binomial sign test on the non-tied pairs (ties are dropped, the usual convention)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def bootstrap_ci(diffs, confidence: float = 0.95, resamples: int = 10000, seed: int = 0):
    """Percentile bootstrap interval of the mean of `diffs` (resampling seeds with replacement)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(1)
    alpha = (1 - confidence) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


def failure_probability(mean: float, sd: float, n: int) -> float:
    """P(the mean of n fresh paired differences has the wrong sign), normal approximation N(mean, sd^2 / n).

    This is how the CI tests state how often their direction assertion would fail by chance.
    """
    if n <= 0:
        return 1.0
    if sd == 0:
        return 0.0 if mean != 0 else 1.0
    return 0.5 * math.erfc(abs(mean) * math.sqrt(n) / (sd * math.sqrt(2)))


def paired(a, b, confidence: float = 0.95) -> dict:
    """Compare method a with method b on the same seeds: differences a - b, their spread and a sign test.

    a, b: per-seed values in seed order (same length). Returns a JSON-ready dict.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired values need equal 1-D shapes, got {a.shape} and {b.shape}")
    d = a - b
    n = d.size
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    low, high = bootstrap_ci(d, confidence)
    return {"n": n, "mean_a": float(a.mean()), "mean_b": float(b.mean()), "diffs": d.tolist(),
            "mean_diff": float(d.mean()), "sd_diff": sd, "se_diff": sd / math.sqrt(n) if n > 1 else float("nan"),
            "ci_low": low, "ci_high": high, "confidence": confidence,
            "a_higher": wins, "b_higher": losses, "ties": n - wins - losses, "sign_test_p": sign_test_p(wins, losses)}


def format_paired_row(label: str, p: dict, digits: int = 3) -> str:
    """One markdown table row: label | mean a | mean b | mean diff +- se | CI | a>b / b>a / ties | sign-test p."""
    f = f"{{:.{digits}f}}"
    if p["n"] < 2:  # a spread needs two seeds: no "± nan" and no interval of one value
        spread, interval = " (one seed: no spread)", "one seed: no spread"
    else:
        spread, interval = f" ± {f.format(p['se_diff'])}", f"[{f.format(p['ci_low'])}, {f.format(p['ci_high'])}]"
    return (f"| {label} | {f.format(p['mean_a'])} | {f.format(p['mean_b'])} | {f.format(p['mean_diff'])}{spread} | "
            f"{interval} | {p['a_higher']}/{p['b_higher']}/{p['ties']} | {p['sign_test_p']:.2g} |")


PAIRED_HEADER = ("| comparison (a vs b) | mean a | mean b | mean (a - b) ± se | 95% bootstrap CI | a>b / b>a / ties "
                 "| sign-test p |\n|---|---|---|---|---|---|---|")


def format_probability(p: float) -> str:
    """The normal approximation is not trustworthy far in the tail: anything below 1e-6 reads '< 1e-6'."""
    return "< 1e-6" if p < 1e-6 else f"{p:.1e}"
