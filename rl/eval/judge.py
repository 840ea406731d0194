"""Pairwise judge-based evaluation (MAESTRO's protocol for open-domain tasks): a local judge LM compares this run's
response with a baseline's on the same prompt, in both orders, and the run's win / tie / loss rates are reported with
95% confidence intervals.

- The judge is any HF causal LM (`eval.py --judge_model PATH`). It reads JUDGE_TEMPLATE and its verdict is the
  likelier continuation, " A" or " B" (no sampling, no parsing of free text: credo's reading, so that a small or
  chatty judge still gives a verdict and the evaluation is deterministic).
- Both orders, to cancel position bias: the run's response wins a prompt when the judge prefers it as A *and* as
  B, loses when the judge prefers the baseline both times, and ties otherwise (a judge that always says "A" gives
  only ties). Identical responses always tie.
- Intervals: Wilson score intervals, 95%, per rate, over prompts (credo's reading: prompts are the independent
  units; the n samples of a problem are judged on its first sample only).
A 135M judge (the CPU default) is a smoke test of the pipeline, not a measurement.
"""
import math

import torch

JUDGE_TEMPLATE = ("Which response answers the question better?\n\nQuestion: {question}\n\nResponse A: {a}\n\n"
                  "Response B: {b}\n\nThe better response is Response")
Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95):
    """(low, high) Wilson score interval of a binomial rate; (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pair_outcome(run_first_preferred: bool, run_second_preferred: bool) -> str:
    """win / loss / tie from the two orders: (run as A, baseline as B) and (baseline as A, run as B)."""
    if run_first_preferred and run_second_preferred:
        return "win"
    if not run_first_preferred and not run_second_preferred:
        return "loss"
    return "tie"


def rates(outcomes: list) -> dict:
    """{judge/win, judge/tie, judge/loss, each with _ci_low / _ci_high, judge/pairs} from a list of outcomes."""
    n = len(outcomes)
    out = {"judge/pairs": n}
    for kind in ("win", "tie", "loss"):
        k = sum(o == kind for o in outcomes)
        out[f"judge/{kind}"] = k / n if n else float("nan")
        out[f"judge/{kind}_ci_low"], out[f"judge/{kind}_ci_high"] = wilson_interval(k, n)
    return out


class Judge:
    """A causal LM that says which of two responses is better: prefers_a(question, a, b) -> bool."""

    def __init__(self, model, tokenizer, max_length: int = 2048):
        self.model, self.tokenizer, self.max_length = model.eval(), tokenizer, max_length
        self.choices = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in (" A", " B")]
        if not all(self.choices) or self.choices[0] == self.choices[1]:
            raise ValueError("--judge_model: its tokenizer cannot tell ' A' from ' B'; it cannot judge")

    @torch.no_grad()
    def margin(self, question: str, a: str, b: str) -> float:
        """log p(" A") - log p(" B") as the continuation of JUDGE_TEMPLATE (summed over the choice's tokens, so a
        tokenizer that splits " A" in two still judges)."""
        prefix = self.tokenizer(JUDGE_TEMPLATE.format(question=question, a=a, b=b),
                                add_special_tokens=False)["input_ids"]
        scores = []
        device = next(self.model.parameters()).device
        for choice in self.choices:
            ids = torch.tensor([(prefix + choice)[-self.max_length:]], device=device)
            logp = torch.log_softmax(self.model(input_ids=ids).logits[0, -len(choice) - 1:-1].float(), -1)
            scores.append(float(logp.gather(1, ids[0, -len(choice):].unsqueeze(1)).sum()))
        return scores[0] - scores[1]

    def compare(self, question: str, run: str, baseline: str) -> str:
        """win / tie / loss of `run` against `baseline` on `question`, judged in both orders."""
        if run == baseline:
            return "tie"
        run_as_a = self.margin(question, run, baseline) > 0
        run_as_b = self.margin(question, baseline, run) < 0
        return pair_outcome(run_as_a, run_as_b)


def final_response(problem: dict) -> str:
    """A results.json problem's first sample's last assistant turn ('' when there is none)."""
    responses = problem.get("responses") or [[]]
    return responses[0][-1] if responses[0] else ""


def judge_results(judge: Judge, questions: dict, problems: list, baseline_problems: list) -> dict:
    """Judge every problem present in both results (matched by id); questions: {id: prompt text}.

    Returns rates(...) plus judge/unmatched (problems of this run without a baseline response)."""
    baseline = {str(p["id"]): p for p in baseline_problems}
    outcomes, unmatched = [], 0
    for problem in problems:
        other = baseline.get(str(problem["id"]))
        if other is None:
            unmatched += 1
            continue
        outcomes.append(judge.compare(questions[str(problem["id"])], final_response(problem), final_response(other)))
    out = rates(outcomes)
    out["judge/unmatched"] = unmatched
    return out
