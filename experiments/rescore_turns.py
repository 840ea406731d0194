"""Re-score one turn of an eval results.json's recorded responses with the env's current verifier.

    python experiments/rescore_turns.py experiments/results/archive/tcpo_vs_mtgrpo/base_model_boxes_only/results.json \
        --env arith_multi --turn 1

For checking a verifier change against responses already sampled, without sampling again. Only turn 1 is exact:
later turns' texts followed feedback the old verifier wrote. Prints how many responses got each number of parts
right (a graded env's score x parts) and the mean score.
"""
import argparse
import json
from collections import Counter

from benchmarks.archive_pack import unpacked
from envs import make_env


def rescore(problems: list, env_name: str, turn: int) -> list:
    """[score of turn `turn` (1-based) of every recorded sample that has one], problems as in results.json."""
    verifier = make_env(env_name).make_verifier()
    return [verifier(None, texts[turn - 1], {"answer": p["answer"]})
            for p in problems for texts in p["responses"] if len(texts) >= turn]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="an eval.py results.json (it records each sample's responses)")
    p.add_argument("--env", required=True, help="the env whose verifier re-scores (e.g. arith_multi)")
    p.add_argument("--turn", type=int, default=1, help="which turn's texts to re-score (1-based)")
    p.add_argument("--parts", type=int, default=3, help="parts per problem, to print scores as parts right")
    a = p.parse_args(argv)
    with open(unpacked(a.results)) as f:  # a results.json inside a committed archive: unpacked first
        problems = json.load(f)["problems"]
    scores = rescore(problems, a.env, a.turn)
    counts = Counter(round(s * a.parts) for s in scores)
    print(f"rescore_turns: {len(scores)} turn-{a.turn} responses; parts right: "
          + ", ".join(f"{k}: {counts[k]}" for k in range(a.parts + 1))
          + f"; mean score {sum(scores) / max(len(scores), 1):.4f}")


if __name__ == "__main__":
    main()
