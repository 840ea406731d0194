"""The MAESTRO task mix: eval.py reports accuracy per prompt kind, the quantity MAESTRO's claim is about."""
from envs.base import make_env
from envs.mixed import MixedEnv, make_mixed_split


def _play(row, answer_text, max_turns=1):
    env = make_env("mixed", max_turns=max_turns)
    env.reset(row)
    for _ in range(max_turns):
        if env.step(answer_text).done:
            break
    return env.episode_record()


def test_eval_metrics_give_each_prompt_kind_its_own_accuracy():
    arith, describe = make_mixed_split("eval", 2)
    assert (arith["kind"], describe["kind"]) == ("arith", "describe")
    records = [_play(arith, f"\\boxed{{{arith['answer']}}}"), _play(arith, "\\boxed{-1}"),
               _play(describe, f"A calm one. \\boxed{{{describe['answer']}}}"), _play(describe, "\\boxed{nothing}"),
               _play(describe, f"\\boxed{{{describe['answer'].upper()}}}")]
    assert MixedEnv.eval_metrics(records) == {"pass@1/arith": 0.5, "pass@1/describe": 2 / 3}


def test_the_record_holds_the_last_turn_not_the_best_one():
    arith = make_mixed_split("eval", 1)[0]
    env = make_env("mixed", max_turns=2, episode_end="max_turns")
    env.reset(arith)
    env.step(f"\\boxed{{{arith['answer']}}}")
    env.step("\\boxed{-1}")  # a solved answer broken on the last turn
    assert env.episode_record() == {"kind": "arith", "final_score": 0.0}
