import json

import pytest

from rl.rollout.data import DataError, PromptStream, load_rows
from rl.rollout.data_files import SUPPORTED

ROWS = [{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": "4"}, {"problem": "3+3", "answer": "007"}]


def write(tmp_path, content: bytes, name="train.jsonl"):
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("content,fragment", [
    (b'{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"\n', ":2: malformed JSON"),
    (b'{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n', ":2: missing key 'answer'"),
    (b'{"problem": "  ", "answer": "2"}\n', ":1: empty prompt"),
    (b'{"problem": "caf\xe9", "answer": "2"}\n', ":1: not valid UTF-8"),
    (b'[1, 2]\n', ":1: expected a JSON object"),
])
def test_bad_rows_name_the_file_and_line(tmp_path, content, fragment):
    path = write(tmp_path, content)
    with pytest.raises(DataError) as exc:
        load_rows(path, ("problem", "answer"))
    assert path in str(exc.value) and fragment in str(exc.value)


def test_a_missing_key_lists_the_keys_the_row_has(tmp_path):
    path = write(tmp_path, b'{"question": "1+1", "solution": "2"}\n')
    with pytest.raises(DataError, match=r"missing key 'problem' \(the row has keys: 'question', 'solution'"):
        load_rows(path, ("problem", "answer"))


def _write_each_format(tmp_path) -> dict:
    """One real file (or folder) per format, written by the library a user would write it with."""
    import datasets
    import pandas as pd
    import pyarrow as pa
    ds = datasets.Dataset.from_list(ROWS)
    paths = {fmt: str(tmp_path / f"train.{fmt}") for fmt in ("jsonl", "csv", "tsv", "parquet", "arrow")}
    pd.DataFrame(ROWS).to_json(paths["jsonl"], orient="records", lines=True)
    pd.DataFrame(ROWS).to_csv(paths["csv"], index=False)
    pd.DataFrame(ROWS).to_csv(paths["tsv"], index=False, sep="\t")
    pd.DataFrame(ROWS).to_parquet(paths["parquet"])
    table = pa.Table.from_pylist(ROWS)
    with pa.OSFile(paths["arrow"], "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    paths["json_array"] = str(tmp_path / "array.json")
    ds.to_json(paths["json_array"], lines=False)
    paths["json_lines"] = str(tmp_path / "lines.json")
    ds.to_json(paths["json_lines"], lines=True)
    paths["save_to_disk"] = str(tmp_path / "disk")
    ds.save_to_disk(paths["save_to_disk"])
    paths["save_to_disk_dict"] = str(tmp_path / "disk_dict")
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(paths["save_to_disk_dict"])
    paths["hf_folder"] = str(tmp_path / "hf_folder")
    (tmp_path / "hf_folder" / "data").mkdir(parents=True)
    ds.to_parquet(str(tmp_path / "hf_folder" / "data" / "train-00000-of-00001.parquet"))
    ds.select([0]).to_parquet(str(tmp_path / "hf_folder" / "data" / "test-00000-of-00001.parquet"))
    return paths


@pytest.fixture(scope="module")
def format_files(tmp_path_factory):
    return _write_each_format(tmp_path_factory.mktemp("formats"))


@pytest.mark.parametrize("fmt", ["jsonl", "json_array", "json_lines", "csv", "tsv", "parquet", "arrow", "save_to_disk",
                                 "save_to_disk_dict", "hf_folder"])
def test_every_common_format_gives_the_same_rows(format_files, fmt):
    # CSV keeps "007" as text: the answer a verifier compares against is the one the user wrote
    assert load_rows(format_files[fmt], ("problem", "answer")) == ROWS


@pytest.mark.parametrize("fmt", ["save_to_disk_dict", "hf_folder"])
def test_data_split_picks_a_split_of_a_folder_and_a_wrong_one_lists_the_splits(format_files, fmt):
    assert load_rows(format_files[fmt], ("problem", "answer"), split="test") == ROWS[:1]
    with pytest.raises(DataError, match=r"no split 'validation'; its splits are (train, test|test, train)"):
        load_rows(format_files[fmt], ("problem", "answer"), split="validation")


def test_a_comma_list_mixes_files_of_different_formats(format_files):
    spec = f"{format_files['parquet']},{format_files['csv']}"
    assert load_rows(spec, ("problem", "answer")) == ROWS + ROWS


def test_a_bad_row_of_a_table_names_the_file_and_row(tmp_path):
    import pandas as pd
    path = str(tmp_path / "train.parquet")
    pd.DataFrame([{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": None}]).to_parquet(path)
    with pytest.raises(DataError, match=r"train.parquet: row 2: missing key 'answer'"):
        load_rows(path, ("problem", "answer"))
    assert load_rows(path, ("problem", "answer"), skip_bad_rows=True) == [{"problem": "1+1", "answer": "2"}]


@pytest.mark.parametrize("name,content,fragment", [
    ("train.txt", b"1+1\n", "unknown data format '.txt'; supported: .jsonl"),
    ("train.parquet", b'{"problem": "1+1"}\n', "cannot be read as parquet"),
    ("train.json", b'[{"problem": "1+1", "answer": "2"},\n {"problem": }]', "train.json:2: malformed JSON"),
])
def test_a_file_that_is_not_what_it_claims_gets_a_clear_error(tmp_path, name, content, fragment):
    path = write(tmp_path, content, name)
    with pytest.raises(DataError) as exc:
        load_rows(path, ("problem", "answer"))
    assert fragment in str(exc.value) and path in str(exc.value)


def test_a_folder_without_data_files_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="cannot be read as folder"):
        load_rows(str(tmp_path / "empty"), ("problem", "answer"))


def test_unknown_format_message_names_every_supported_format():
    for fmt in (".jsonl", ".json", ".csv", ".parquet", ".arrow", "save_to_disk", "HF dataset folder"):
        assert fmt in SUPPORTED


def test_an_env_that_reads_its_own_fields_does_not_need_prompt_and_answer_keys(tmp_path):
    import argparse
    path = write(tmp_path, json.dumps({"task_id": "t1"}).encode() + b"\n")
    args = argparse.Namespace(env="tests.fixture_envs:TaskIdEnv", data_path=path, data_split="train",
                              prompt_key="problem", answer_key="answer", skip_bad_rows=False,
                              num_train_samples=1, seed=0)
    from rl.rollout.data import DataSettings, training_rows
    assert training_rows(DataSettings.from_args(args)) == [{"task_id": "t1"}]
    args.env = "math"  # the default keys are still checked for envs that read them
    with pytest.raises(DataError, match="missing key 'problem'"):
        training_rows(DataSettings.from_args(args))


def test_stream_gives_ranks_disjoint_slices_and_resumes_at_its_position():
    rows = [{"i": i} for i in range(10)]
    a, b = PromptStream(rows, seed=0), PromptStream(rows, seed=0)
    r0, ids0 = a.next_batch(4, rank=0, per_rank=2)
    r1, ids1 = b.next_batch(4, rank=1, per_rank=2)
    assert ids0 == [0, 1] and ids1 == [2, 3]
    assert not {x["i"] for x in r0} & {x["i"] for x in r1}
    for _ in range(3):  # crosses the epoch boundary at row 10
        a.next_batch(4, 0, 2)
    resumed = PromptStream(rows, seed=0)
    resumed.load_state_dict(a.state_dict())
    assert resumed.next_batch(4, 0, 2) == a.next_batch(4, 0, 2)


def test_data_readme_points_only_at_files_that_exist_and_states_their_row_counts():
    import os
    import re
    from tests.helpers import REPO_ROOT
    with open(os.path.join(REPO_ROOT, "data", "README.md")) as f:
        text = f.read()
    refs = [r.split()[0] for r in re.findall(r"`([^`]+)`", text)]
    paths = [r for r in refs if "/" in r or r.endswith((".sh", ".py", ".md", ".jsonl"))]
    assert len(paths) >= 10
    missing = [p for p in paths if not any(os.path.exists(os.path.join(REPO_ROOT, base, p)) for base in ("data", ""))]
    assert missing == []
    for name, rows in re.findall(r"^\| `([^`]+\.jsonl)` \| (\d+) \|", text, flags=re.M):
        with open(os.path.join(REPO_ROOT, "data", name), "rb") as f:
            assert sum(1 for line in f if line.strip()) == int(rows), name


def test_a_file_smaller_than_one_step_s_batch_is_named_in_a_warning():
    from rl.rollout.data import repeated_rows_warning
    assert repeated_rows_warning(8, 8, "--data_path x.jsonl") is None
    text = repeated_rows_warning(4, 8, "--data_path x.jsonl")
    assert text.startswith("--data_path x.jsonl has 4 rows and a step takes 8 prompts") and "2.0 times" in text


def test_the_stream_records_the_data_row_of_every_prompt_it_hands_out():
    rows = [{"i": i} for i in range(5)]
    stream = PromptStream(rows, seed=3)
    served = [row["i"] for _ in range(4) for row in stream.next_batch(3, rank=0, per_rank=3)[0]]  # 12: over 2 epochs
    assert stream.consumed == served and stream.position == 12
    assert sorted(served[:5]) == list(range(5)) and sorted(served[5:10]) == list(range(5))  # each epoch: every row once
    state = stream.state_dict()
    stream.next_batch(3, 0, 3)
    assert state["consumed"] == served  # a copy: the trainer keeps the step's start to restore it
    resumed = PromptStream(rows, seed=3)
    resumed.load_state_dict(state)
    assert resumed.consumed == served and resumed.next_batch(3, 0, 3)[0] == [rows[r] for r in stream.consumed[12:]]


@pytest.mark.parametrize("change,fragment", [
    (lambda rows, seed: (rows, seed + 1), "serves row"),                            # another --seed
    (lambda rows, seed: ([*rows[:2], {"i": 99}, *rows[3:]], seed), "differ in content"),  # an edited row
    (lambda rows, seed: (rows[:4], seed), "resumed data has 4 rows"),
])
def test_a_resume_refuses_data_that_would_serve_other_prompts(change, fragment):
    rows = [{"i": i} for i in range(5)]
    stream = PromptStream(rows, seed=3)
    for _ in range(3):
        stream.next_batch(2, 0, 2)
    other_rows, other_seed = change(rows, 3)
    with pytest.raises(DataError, match=fragment):
        PromptStream(other_rows, other_seed).load_state_dict(stream.state_dict())


def test_a_checkpoint_from_before_the_record_resumes_at_its_position():
    rows = [{"i": i} for i in range(5)]
    stream = PromptStream(rows, seed=3)
    stream.next_batch(4, 0, 4)
    old = {"position": 4, "seed": 3, "num_rows": 5}  # what checkpoints held before `consumed`
    resumed = PromptStream(rows, seed=3)
    resumed.load_state_dict(old)
    assert resumed.consumed == stream.consumed and resumed.position == 4
