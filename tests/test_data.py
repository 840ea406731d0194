import pytest

from rl.data import DataError, PromptStream, load_jsonl_rows


def write(tmp_path, content: bytes):
    path = tmp_path / "train.jsonl"
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
        load_jsonl_rows(path, ("problem", "answer"))
    assert path in str(exc.value) and fragment in str(exc.value)


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
