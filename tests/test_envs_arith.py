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
