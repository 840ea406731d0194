from envs import make_env
from envs.arith import make_arith_split


def test_eval_split_is_fixed_and_train_never_contains_it():
    eval_rows = make_arith_split("eval", 200)
    assert eval_rows == make_arith_split("eval", 200, seed=99)  # the held-out set ignores the seed
    held_out = {(r["a"], r["op"], r["b"]) for r in eval_rows}
    train = make_arith_split("train", 5000, seed=1)
    assert not held_out & {(r["a"], r["op"], r["b"]) for r in train}
    assert train == make_arith_split("train", 5000, seed=1)
    assert train != make_arith_split("train", 5000, seed=2)


def test_problems_mix_one_and_two_digit_sums_and_differences_with_correct_answers():
    rows = make_arith_split("train", 400, seed=0)
    assert {r["digits"] for r in rows} == {1, 2} and {r["op"] for r in rows} == {"+", "-"}
    for r in rows:
        assert r["answer"] == (r["a"] + r["b"] if r["op"] == "+" else r["a"] - r["b"]) >= 0
        assert f"{r['a']} {r['op']} {r['b']}" in r["prompt"]


def test_env_round_trip_scores_the_answer():
    env = make_env("arith")
    row = make_arith_split("train", 1, seed=3)[0]
    messages = env.reset(row)
    assert messages == [{"role": "user", "content": row["prompt"]}]
    assert env.step(f"so \\boxed{{{row['answer']}}}").score == 1.0
    assert env.step(f"{row['answer'] + 1}").score == 0.0


def test_train_split_has_the_eval_splits_mix_of_problem_sizes():
    """The train split once excluded the eval split's first 1000 rows, which held out 142 of the 155 single-digit
    problems: training was 93% two-digit while the eval is half single-digit (issue #41)."""
    def one_digit_share(rows):
        return sum(r["digits"] == 1 for r in rows) / len(rows)
    train, eval_rows = make_arith_split("train", 4000, seed=1), make_arith_split("eval", 4000)
    assert abs(one_digit_share(train) - 0.5) < 0.05 and abs(one_digit_share(eval_rows) - 0.5) < 0.05
    # held out at any eval size, not only the first rows
    assert not {(r["a"], r["op"], r["b"]) for r in eval_rows} & {(r["a"], r["op"], r["b"]) for r in train}
