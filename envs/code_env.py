"""Multi-turn code: the model writes Python in a fenced block; the sandbox runs the tests; the score of a turn is
the pass rate; the feedback is the first failing test and how it failed, a held-out test by its number only.

Rows (envs/code_tasks.py reads each layout): MBPP style (`prompt`, `test_list`, optional `test_imports`, `code`),
HumanEval style (`prompt` = a function stub, `test` defining check(candidate), `entry_point`), or LiveCodeBench's
own (`question_content`, `starter_code`, `public_test_cases` / `private_test_cases` with stdin/stdout or functional
tests, `metadata`). Each layout is recognised by its own fields, so no --prompt_key / --answer_key is needed:
`--env code --data_path data/mbpp/sanitized.jsonl --max_turns 3` (or data/humaneval/, or LiveCodeBench rows). A
--prompt_key / --answer_key that names another field is required in every row, and --prompt_key names an MBPP or
HumanEval row's task text.

The first message gives what the tests call, as each benchmark's own prompt does (the model cannot guess a name):
- MBPP: the sentence of Austin et al. 2021 (google-research/google-research mbpp/README.md), word for word,
  "You are an expert Python programmer, and here is your task: {prompt} Your code should pass these
  tests:\n\n{tests}\n[BEGIN]\n{code}\n[DONE]". The paper lists all of a task's tests; bigcode-evaluation-harness
  (InCoder's format) and EvalPlus's MBPP+ show the first one only. credo's reading: the paper's sentence with the
  FIRST test only (it names the function and its call; every test of the shipped rows calls the same one), and
  the fenced block of INSTRUCTION in place of [BEGIN]/[DONE] (a chat model's reply is parsed by extract_code).
  The score is the pass rate over ALL of `test_list`, the shown test included (as those harnesses score).
- HumanEval: its own `prompt` field (imports, signature and docstring with its examples), then INSTRUCTION.
- LiveCodeBench: its own system message and question template (envs/code_tasks.py).

Shown and held back: MBPP shows `test_list[:MBPP_SHOWN_TESTS]`; the other tests, and all of HumanEval's `test`
(check()), are held out: a program that hard-codes the shown assert scores at most 1/len(test_list). LiveCodeBench
shows its public tests (the statement's examples) and holds out its private ones. The feedback of a later turn
quotes a failing test only if it was shown; for a held-out one it says "held-out test i of n" and, for an assert,
its error (its type and message, which may quote a value the program was called with), for a stdin or functional
test its verdict alone, never the test's source, input or output (rewards.code.run_tests(shown=...)).
"""
import re

from envs.base import VerifyAndRefineEnv, register_env
from envs.code_tasks import INSTRUCTION, MBPP_SHOWN_TESTS, MBPP_TEMPLATE, check_row, task  # noqa: F401
from rewards.code import run_tests

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def shown_tests(sample: dict) -> list:
    """The tests the first message shows, the first of the tests the verifier runs (none of HumanEval's)."""
    found = task(sample)
    return found.tests[:found.shown]


def first_message(sample: dict, prompt_key: str = "prompt") -> str:
    """The task as the benchmark's own prompt gives it (module docstring), then the answer format (the last message
    of the opening chat: LiveCodeBench's opens with a system message)."""
    return task(sample, prompt_key).messages[-1]["content"]


def extract_code(text: str):
    """The last fenced code block (or an unterminated one at the end), else None."""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    open_block = re.search(r"```(?:python|py)?\s*\n(.*)$", text, re.DOTALL)
    return open_block.group(1) if open_block else None


class CodeVerifier:
    """fn(prompt, completion, sample) -> pass rate of the completion's code on the sample's tests."""

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 1024):
        self.limits = {"timeout_s": timeout_s, "memory_mb": memory_mb}

    @staticmethod
    def program_and_tests(code: str, sample: dict):
        """(program, tests, run_tests keywords) for the model's code on this row (envs/code_tasks.py)."""
        found = task(sample)
        return found.prefix + code, found.tests, {"shown": found.shown, "keep": found.keep}

    def run(self, completion: str, sample: dict):
        code = extract_code(completion)
        if code is None:
            return 0.0, "No ```python code block was found in your answer."
        program, tests, keywords = self.program_and_tests(code, sample)
        result = run_tests(program, tests, **keywords, **self.limits)
        return result.score, result.feedback

    def __call__(self, prompt, completion, sample) -> float:
        return self.run(completion, sample)[0]


@register_env("code")
class CodeEnv(VerifyAndRefineEnv):
    # MBPP's fields (data/mbpp/sanitized.jsonl); other layouts are told apart by theirs. A function needs room.
    default_prompt_key, default_answer_key = "prompt", "test_list"
    default_max_answer_seq_len = 512

    @classmethod
    def make_verifier(cls, **kwargs):
        return CodeVerifier()

    @classmethod
    def data_keys(cls, prompt_key: str, answer_key: str) -> tuple:
        """Only the fields the flags name beyond MBPP's own: each layout's fields are checked by check_row, so a
        HumanEval or LiveCodeBench row needs no --prompt_key / --answer_key."""
        return tuple(k for k in (prompt_key, answer_key) if k not in (cls.default_prompt_key, cls.default_answer_key))

    @classmethod
    def check_row(cls, location: str, row: dict) -> dict:
        """A row that is no code task of a known layout is refused at load, by file and line (BadCodeRow)."""
        return check_row(location, row)

    def reset(self, sample: dict) -> list:
        self.sample, self.turn = sample, 0
        return [dict(m) for m in task(sample, self.prompt_key).messages]

    def first_message(self, sample: dict) -> str:
        return first_message(sample, self.prompt_key)

    solved_feedback = ("All tests passed. You may keep this code or improve it; give the whole solution again in a "
                       "```python code block.")

    def verdict(self, model_text: str) -> tuple:
        return self.verifier.run(model_text, self.sample)

    def retry_feedback(self, score: float, detail) -> str:
        return f"Some tests failed.\n{detail}\nFix the code."

    def score_turn(self, model_text: str) -> float:
        return self.verifier.run(model_text, self.sample)[0]
