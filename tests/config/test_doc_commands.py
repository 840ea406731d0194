"""Every train.py / eval.py command the README, docs/ and the folder READMEs show, checked as written, so that an
example a newcomer copies cannot rot.

- Every command is parsed and validated by train.py's / eval.py's own checks (quick).
- The README's and envs/README.md's commands also run, shrunk by SMOKE (slow): the model becomes the suite's tiny
  random Llama (a hub id or another run's output folder cannot be reached here), and the flags below are appended
  (argparse keeps the last value), so each runs one short step or a few eval problems, through train.py's / eval.py's
  main() in the test process: under 1 s each on a 2-core CPU (4-5 s each as `python train.py`).

A command that needs what a CPU machine cannot provide is listed in SKIP with the reason.
"""
import glob
import os
import re
import shlex

import pytest

import eval as eval_cli
from rl.config import parse_args
from tests.helpers import REPO_ROOT, run_train_in_process
from tests.train.test_train_deepspeed import assert_ok

DOCS = ["README.md", *sorted(os.path.relpath(p, REPO_ROOT) for p in glob.glob(os.path.join(REPO_ROOT, "docs", "*.md"))),
        "envs/README.md", "data/README.md", "experiments/README.md"]
RUN_IN_FULL = ("README.md", "envs/README.md")  # the newcomer's pages: run shrunk, not only parsed
# Pages whose settings are GPU-sized: their first train.py and eval.py lines are CPU-sized (run shrunk too, as the
# README's are) and the GPU-sized ones follow (issue #65 item 7: a toolcall step of 6,000-token prompts ran 10 minutes)
CPU_FIRST = ("docs/toolcall.md", "docs/code-sandbox.md")
# The smoke setting (documented in docs/tests.md): one step of 2 prompts x 2 responses of 8 tokens, nothing saved
SMOKE_TRAIN = ["--max_steps", "1", "--per_device_generation_batch_size", "2", "--num_generations", "2",
               "--max_answer_seq_len", "8", "--max_prompt_seq_len", "256", "--save_strategy", "no", "--dtype", "fp32",
               "--eval_steps", "0"]
SMOKE_EVAL = ["--limit", "4", "--n", "1", "--k", "1", "--max_new_tokens", "8", "--temperature", "0", "--dtype",
              "fp32"]
SKIP = {
    "--appworld_backend remote": "needs AppWorld's own server and its downloaded data (docs/appworld.md)",
    "--seed S": "an experiment template: S is filled in by the sweep script",
}
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]*(?:/[A-Z_]+)*|output/.*|out/.*)$")  # MODEL, PATH/TO/RM, output/run/final


def doc_commands():
    """(page, command line, script, its arguments) of every train.py / eval.py command in a bash block."""
    found = []
    for page in DOCS:
        with open(os.path.join(REPO_ROOT, page)) as f:
            text = f.read()
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).split("\n"):
                line = re.split(r"\s#\s", line)[0].strip()
                words = shlex.split(line) if re.search(r"\b(train|eval)\.py\b", line) else []
                script = next((w for w in words if w in ("train.py", "eval.py")), None)
                if script and "--help" not in words:
                    found.append((page, line, script, words[words.index(script) + 1:]))
    return found


COMMANDS = doc_commands()
CPU_LINES = [next(c for c in COMMANDS if c[0] == page and c[2] == script) for page in CPU_FIRST
             for script in ("train.py", "eval.py") if any(c[0] == page and c[2] == script for c in COMMANDS)]


def command_id(command):
    return f"{command[0]}:{' '.join(command[3])[:60]}"


def skip_reason(line: str):
    return next((why for marker, why in SKIP.items() if marker in line), None)


def with_tiny_model(args: list, model: str, compare: str) -> list:
    """The command with its model (and any other placeholder path) swapped for what exists here."""
    args = list(args)
    for flag in ("--model_name_or_path", "--reward_model_name_or_path", "--judge_model"):
        if flag in args and PLACEHOLDER.match(args[args.index(flag) + 1]) or flag in args and "/" in \
                args[args.index(flag) + 1] and not os.path.exists(os.path.join(REPO_ROOT, args[args.index(flag) + 1])):
            args[args.index(flag) + 1] = model
    if "--model_name_or_path" not in args:
        args += ["--model_name_or_path", model]
    if "--compare" in args:
        args[args.index("--compare") + 1] = compare
    return args


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """The README's my_pkg/rewards.py and envs/README.md's my_envs.py, saved where a user would put them."""
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        rewards = next(code for code in re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
                       if code.startswith("# my_pkg/rewards.py"))
    with open(os.path.join(REPO_ROOT, "envs", "README.md")) as f:
        (envs,) = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "rewards.py").write_text(rewards)
    (tmp_path / "my_envs.py").write_text(envs)
    (tmp_path / "results.json").write_text('{"metrics": {}, "config": {}, "problems": []}')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(REPO_ROOT)  # the commands' relative paths (data/...) are from the checkout
    yield tmp_path
    import sys
    for name in ("my_pkg", "my_pkg.rewards", "my_envs"):
        sys.modules.pop(name, None)


def test_the_pages_show_commands_to_check():
    pages = {page for page, *_ in COMMANDS}
    assert {"README.md", "envs/README.md"} <= pages and len(COMMANDS) >= 20


@pytest.mark.parametrize("command", COMMANDS, ids=command_id)
def test_every_documented_command_parses_as_written(command, user_code, tiny_model_dir):
    page, line, script, args = command
    if skip_reason(line):
        pytest.skip(skip_reason(line))
    args = with_tiny_model(args, tiny_model_dir, str(user_code / "results.json"))
    if script == "train.py":
        parse_args(args)
    else:
        eval_cli.validate(eval_cli.build_parser().parse_args(args))


def test_a_gpu_sized_page_shows_a_cpu_sized_line_first(tiny_model_dir):
    """Its first train.py line: the smoke settings (one step of at most 4 responses of at most 64 tokens, nothing
    saved); its first eval.py line: at most 20 problems; tool calling capped to short schemas on both."""
    assert {page for page, *_ in CPU_LINES} == set(CPU_FIRST)
    for page, line, script, args in CPU_LINES:
        args = with_tiny_model(args, tiny_model_dir, "")
        if script == "train.py":
            a = parse_args(args)
            assert a.max_steps <= 2 and a.save_strategy == "no", (page, line)
            assert a.per_device_generation_batch_size * a.num_generations <= 4 and a.max_answer_seq_len <= 64, line
        else:
            a = eval_cli.build_parser().parse_args(args)
            assert a.limit <= 20, (page, line)
        if a.env == "toolcall":
            assert 0 < a.toolcall_max_schema_chars <= 1000, (page, line)


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] in RUN_IN_FULL or c in CPU_LINES], ids=command_id)
def test_the_readme_commands_run_shrunk(command, user_code, tiny_model_dir, tmp_path, capsys):
    page, line, script, args = command
    if skip_reason(line):
        pytest.skip(skip_reason(line))
    args = with_tiny_model(args, tiny_model_dir, str(user_code / "results.json"))
    if script == "train.py":
        out = ["--output_dir", str(tmp_path / "run")]
        # train.py's main() in this process, as eval.py's below (the user's folder on the path for the reward workers)
        assert_ok(run_train_in_process([*args, *SMOKE_TRAIN, *out], pythonpath=[str(user_code)]))
    else:
        eval_cli.main([*args, *SMOKE_EVAL, "--output_dir", str(tmp_path / "eval")])
        assert os.path.exists(tmp_path / "eval" / "results.json")


def test_the_readme_stays_a_newcomer_s_guide():
    # the deep dives live in docs/ and the findings in experiments/README.md (issue #47: at most 300 lines)
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        assert len(f.read().splitlines()) <= 300
