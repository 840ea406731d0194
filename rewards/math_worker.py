"""Worker process for rewards.math: one JSON request per stdin line, one JSON reply per stdout line.

Runs on its own main thread, so math-verify's signal-based timeouts are active here too.
"""
import json
import sys

from math_verify import parse, verify


def check(gold: str, completion: str) -> bool:
    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=5)
    if not gold_parsed:
        gold_parsed = parse(f"${gold}$", parsing_timeout=5)
    answer = parse(completion, parsing_timeout=5)
    if not gold_parsed or not answer:
        return False
    return bool(verify(gold_parsed, answer, timeout_seconds=5))


def main():
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply = {"correct": check(request["gold"], request["completion"])}
        except Exception as exc:  # reported to the parent, which counts it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
