"""--env toolcall: BFCL's data split by a fixed id hash, the prompt, the step's record and eval.py's Table 1 metrics."""
import json
import os
from collections import Counter

import pytest

from envs import env_class
from envs.toolcall import ToolCallEnv, openapi_tools, prompt_messages, toolcall_metrics
from envs.toolcall_data import ToolCallDataError, bfcl_category, is_held_out, schema_chars, toolcall_rows, user_rows
from rewards.bfcl import AST_CATEGORIES, IRRELEVANCE_CATEGORIES
from rewards.toolcall import parse_response, think_words
from rl.rollout.data import DataError, DataSettings, load_rows, training_rows
from tests.eval.test_eval_cli import eval_in_process

ALL = 10 ** 6


def user_row(i, **overrides):
    row = {"id": f"mine_{i}", "category": "weather", "question": f"Weather in city {i}?",
           "function": [{"name": "get_weather", "description": "Weather now.",
                         "parameters": {"type": "dict", "properties": {"city": {"type": "string", "description": "c"}},
                                        "required": ["city"]}}],
           "ground_truth": [{"get_weather": {"city": [f"city {i}"]}}]}
    return {**row, **overrides}


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def good_answer(row):
    calls = [{"name": name, "parameters": {k: next(v for v in accepted if v != "") for k, accepted in args.items()
                                           if any(v != "" for v in accepted)}}
             for call in row["ground_truth"] for name, args in call.items()]
    return "<think>one call</think>\n<tool_call>\n" + "\n".join(json.dumps(c) for c in calls) + "\n</tool_call>"


def test_toolcall_is_registered_with_its_defaults():
    cls = env_class("toolcall")
    assert cls is ToolCallEnv and cls.default_max_answer_seq_len == 256 and cls.default_eval_data is None
    assert cls.default_max_prompt_seq_len == 4096
    assert (cls.default_prompt_key, cls.default_answer_key) == ("question", "ground_truth")


def test_bfcl_s_single_turn_categories_are_read_whole_with_their_answers():
    counts = {c: len(bfcl_category(c)) for c in AST_CATEGORIES + IRRELEVANCE_CATEGORIES}
    assert counts == {"simple_python": 400, "simple_java": 100, "simple_javascript": 50, "multiple": 200,
                      "parallel": 200, "parallel_multiple": 200, "live_simple": 258, "live_multiple": 1053,
                      "live_parallel": 16, "live_parallel_multiple": 24, "irrelevance": 240, "live_irrelevance": 884}
    assert all(r["ground_truth"] for c in AST_CATEGORIES for r in bfcl_category(c))
    assert not any(r["ground_truth"] for c in IRRELEVANCE_CATEGORIES for r in bfcl_category(c))


@pytest.mark.parametrize("settings", [{}, {"irrelevance": True}, {"categories": "parallel,live_simple"}])
def test_no_held_out_id_ever_reaches_training(settings):
    held_out = {r["id"] for r in toolcall_rows("eval", ALL, 0, **settings)}
    assert held_out and all(is_held_out(i) for i in held_out)
    for seed in range(4):
        train = {r["id"] for r in toolcall_rows("train", ALL, seed, **settings)}
        assert train and not train & held_out
        assert not any(is_held_out(i) for i in train)
    # and through the trainer's own loader, as train.py reads an env's rows
    rows = training_rows(DataSettings(env="toolcall", data_path=None, data_split="train", prompt_key="question",
                                      answer_key="ground_truth", skip_bad_rows=False, num_train_samples=ALL, seed=7,
                                      env_settings=ToolCallEnv.settings_from_args(type("A", (), settings))))
    assert rows and not {r["id"] for r in rows} & held_out


def test_the_split_is_a_fixed_hash_of_the_id_about_a_fifth_of_every_category():
    # pinned: crc32 of these ids mod 10 is 6 2 2 8 3 1 1 9 4 0, held out below 2
    assert [is_held_out(f"simple_python_{i}") for i in range(10)] == [False] * 5 + [True, True, False, False, True]
    held = Counter(r["category"] for r in toolcall_rows("eval", ALL, 0))
    assert sum(held.values()) == 511 and set(held) == set(AST_CATEGORIES)
    for category in ("simple_python", "multiple", "parallel", "live_multiple"):
        assert 0.12 < held[category] / len(bfcl_category(category)) < 0.28


def test_a_schema_cap_keeps_the_short_questions_of_both_splits_and_the_split_itself():
    settings = {"categories": "simple_python,multiple", "max_schema_chars": 1000}
    for split in ("train", "eval"):
        whole = toolcall_rows(split, ALL, 0, categories=settings["categories"])
        capped = toolcall_rows(split, ALL, 0, **settings)
        assert {r["id"] for r in capped} == {r["id"] for r in whole if schema_chars(r) <= 1000}
        assert 0 < len(capped) < len(whole) and {r["category"] for r in capped} == {"simple_python", "multiple"}
    assert all(is_held_out(r["id"]) for r in toolcall_rows("eval", ALL, 0, **settings))
    assert not any(is_held_out(r["id"]) for r in toolcall_rows("train", ALL, 3, **settings))


def test_the_first_eval_rows_cover_every_category():
    first = toolcall_rows("eval", 10, 0)
    assert {r["category"] for r in first} == set(AST_CATEGORIES)
    assert toolcall_rows("eval", 10, 0) == toolcall_rows("eval", 10, 5)  # the held-out set ignores the seed


def test_the_prompt_gives_json_schemas_and_toolrl_s_layout():
    row = next(r for r in bfcl_category("simple_python") if any(
        p["type"] == "float" for p in r["function"][0]["parameters"]["properties"].values()))
    system, user = prompt_messages(row)
    assert user == row["question"][0][0] and system["role"] == "system"
    assert "<think>" in system["content"] and "<tool_call>" in system["content"] and "<response>" not in \
        system["content"]
    tool = json.loads(system["content"].split("one per line):\n", 1)[1].split("\n", 1)[0])
    assert tool["parameters"]["type"] == "object" and tool["description"].endswith("Python 3 syntax.")
    assert "float" not in {p["type"] for p in tool["parameters"]["properties"].values()}
    assert row["function"][0]["parameters"]["type"] == "dict"  # the row itself is untouched: the checker reads it
    assert "<response>" in prompt_messages(row, no_call_rule=True)[0]["content"]


def test_the_worked_examples_are_earlier_chat_turns_with_other_functions():
    row = bfcl_category("simple_python")[0]
    messages = prompt_messages(row, example=True)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[-1] == row["question"][0][0] and "get_weather" not in messages[0]["content"]
    verifier = ToolCallEnv.make_verifier()
    for shot in messages[2:5:2]:  # each example answer is in the layout, its think within DARA's 16 words
        assert parse_response(shot["content"]).error is None and think_words(shot["content"]) <= 16
    with_no_call = prompt_messages({**row, "ground_truth": []}, no_call_rule=True, example=True)
    assert verifier.judge(with_no_call[6]["content"], {**row, "ground_truth": []}).correct


def test_java_arguments_are_shown_as_strings_of_source_code_as_bfcl_shows_them():
    row = bfcl_category("simple_java")[1]
    (tool,) = openapi_tools(row["function"], "java")
    assert {p["type"] for p in tool["parameters"]["properties"].values()} == {"string"}
    assert all("string representation" in p["description"] for p in tool["parameters"]["properties"].values())


def test_a_row_s_own_system_message_joins_the_env_s():
    row = next(r for r in bfcl_category("live_simple") if r["question"][0][0]["role"] == "system")
    messages = prompt_messages(row)
    assert [m["role"] for m in messages].count("system") == 1
    assert row["question"][0][0]["content"] in messages[0]["content"] and messages[-1]["role"] == "user"


def test_a_step_scores_with_bfcl_s_checker_and_records_why_a_parse_failed():
    row = bfcl_category("parallel")[0]
    env = ToolCallEnv(verifier=ToolCallEnv.make_verifier())
    env.reset(row)
    result = env.step(good_answer(row))
    assert (result.score, result.done, result.components) == (1.0, True, {"format": 1.0, "correct": 1.0})
    assert result.info["calls"] == 2.0 and result.info["parse_error"] == ""
    assert env.episode_record()["correct"] == 1 and env.episode_record()["category"] == "parallel"
    env.reset(row)
    result = env.step("<think>two songs</think>\n<tool_call>\n{\"name\": \"spotify.play\", \"arguments\": {}}\n"
                      "</tool_call>")
    assert result.score == 0.0 and result.info["parse_error"].startswith("not_a_call: call line 1")
    record = env.episode_record()
    assert (record["format"], record["correct"], record["id"]) == (0, 0, row["id"])
    assert record["parse_error"] == result.info["parse_error"]


def test_table_1_metrics_average_over_categories_not_responses():
    records = [{"category": "a", "correct": 1, "format": 1}] * 3 + [{"category": "a", "correct": 0, "format": 1}] + \
              [{"category": "b", "correct": 0, "format": 0}] * 4
    m = toolcall_metrics(records)
    assert m["toolcall/accuracy/a"] == 0.75 and m["toolcall/format/b"] == 0.0 and m["toolcall/n/a"] == 4
    assert m["toolcall/Avg Accuracy"] == pytest.approx(0.375) and m["toolcall/Avg Format"] == pytest.approx(0.5)
    assert m["toolcall/Avg Accuracy/se"] == pytest.approx((0.75 * 0.25 / 4) ** 0.5 / 2)
    assert toolcall_metrics([]) == {}


def test_a_user_jsonl_is_split_by_the_same_hash(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [user_row(i) for i in range(40)])
    train = toolcall_rows("train", ALL, 0, data=path)
    held = toolcall_rows("eval", ALL, 0, data=path)
    assert len(train) + len(held) == 40 and held and not {r["id"] for r in train} & {r["id"] for r in held}
    env = ToolCallEnv(verifier=ToolCallEnv.make_verifier())
    env.reset(held[0])
    assert env.step(good_answer(held[0])).score == 1.0


@pytest.mark.parametrize("bad,why", [
    ('{"id": "x", "question": "q"', "not valid JSON"),
    (user_row(1, ground_truth=None) | {"ground_truth": "get_weather"}, "ground_truth must be a list"),
    ({k: v for k, v in user_row(1).items() if k != "function"}, "missing function"),
    (user_row(1, ground_truth=[{"get_time": {}}]), "'get_time', which is not among the row's functions"),
    (user_row(1, question=[]), "question must be"),
    (user_row(0), "id 'mine_0' repeats"),
])
def test_a_bad_user_row_is_named_by_file_and_line(tmp_path, bad, why):
    path = write_jsonl(tmp_path / "mine.jsonl", [user_row(0), bad])
    with pytest.raises(ToolCallDataError) as exc:
        user_rows(path)
    assert str(exc.value).startswith(f"{path}:2: ") and why in str(exc.value)


def test_a_user_file_given_as_data_path_is_checked_for_its_keys_by_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [user_row(0), {"id": "y", "question": "q", "function": []}])
    with pytest.raises(DataError, match=f"{path}:2: missing key 'ground_truth'"):
        load_rows(path, ToolCallEnv.data_keys("question", "ground_truth"))


class Flags:
    max_turns = 1
    toolcall_categories, toolcall_irrelevance, toolcall_data, toolcall_example = "all", False, None, True
    toolcall_max_schema_chars = 0


def refusal(**flags):
    args = type("Args", (Flags,), flags)

    def bad(message):
        raise SystemExit(message)
    try:
        ToolCallEnv.check_flags(args, bad)
    except SystemExit as exc:
        return str(exc)
    return None


def test_bad_settings_are_refused_where_the_flags_are_parsed(tmp_path):
    assert refusal() is None
    assert "--max_turns must be 1" in refusal(max_turns=2)
    assert "unknown BFCL categories simple" in refusal(toolcall_categories="simple")
    assert "leaves no question" in refusal(toolcall_max_schema_chars=50)
    assert "must be >= 0" in refusal(toolcall_max_schema_chars=-1)
    path = write_jsonl(tmp_path / "mine.jsonl", ["{oops"])
    assert refusal(toolcall_data=path) == f"--toolcall_data: {path}:1: not valid JSON (Expecting property name " \
                                          f"enclosed in double quotes)"


def test_eval_py_reports_table_1_and_the_budget_metrics(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "toolcall", "--limit", "4",
                            "--max_new_tokens", "6", "--max_prompt_seq_len", "128", "--length_budget_tokens", "4",
                            "--output_dir", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "results.json").read_text())
    metrics, episodes = result["metrics"], [e for p in result["problems"] for e in p["episodes"]]
    assert {"toolcall/Avg Accuracy", "toolcall/Avg Format", "Exceed", "Joint"} <= set(metrics)
    assert {f"toolcall/accuracy/{c}" for c in AST_CATEGORIES[:4]} <= set(metrics)
    assert len(episodes) == 4 and all(e["parse_error"] for e in episodes)  # a random model writes no layout
    assert metrics["Exceed"] == 1.0 and metrics["Joint"] == 0.0  # 6 tokens, none ended: over a budget of 4
    assert "| toolcall/Avg Accuracy |" in proc.stdout


def test_eval_py_refuses_a_second_turn_and_a_bad_budget(tiny_model_dir, capsys):
    import eval as eval_cli
    for flags, message in ((["--max_turns", "2"], "--max_turns must be 1"),
                           (["--length_budget_tokens", "0"], "--length_budget_tokens must be >= 1")):
        with pytest.raises(SystemExit, match=message):
            eval_cli.validate(eval_cli.build_parser().parse_args(
                ["--model_name_or_path", tiny_model_dir, "--env", "toolcall", *flags]))


@pytest.mark.parametrize("env,train_len,eval_len", [("toolcall", 4096, 4096), ("arith", 256, 1024)])
def test_the_prompt_length_is_the_env_s_unless_a_flag_says_otherwise(env, train_len, eval_len, tiny_model_dir):
    """train.py's 256 cut BFCL's prompts (median about 550-800 tokens with the schemas): the env declares 4096; an env
    that declares nothing keeps each entry point's own default, and an explicit flag wins."""
    import eval as eval_cli
    from rl.config import parse_args
    base = ["--model_name_or_path", tiny_model_dir, "--env", env]
    assert parse_args(base).max_prompt_seq_len == train_len
    assert parse_args(base + ["--max_prompt_seq_len", "300"]).max_prompt_seq_len == 300
    args = eval_cli.build_parser().parse_args(base)
    eval_cli.validate(args)
    assert args.max_prompt_seq_len == eval_len


def test_the_data_files_are_read_from_the_installed_package():
    from rewards.bfcl import bfcl_data_dir
    assert os.path.exists(os.path.join(bfcl_data_dir(), "BFCL_v4_simple_python.json"))
