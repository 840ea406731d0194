"""The math-verify check that rewards.math runs in a reward worker process (on its main thread, so
math-verify's signal-based timeouts are active)."""
from math_verify import parse, verify


def check(gold: str, completion: str) -> bool:
    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=5)
    if not gold_parsed:
        gold_parsed = parse(f"${gold}$", parsing_timeout=5)
    answer = parse(completion, parsing_timeout=5)
    if not gold_parsed or not answer:
        return False
    return bool(verify(gold_parsed, answer, timeout_seconds=5))
