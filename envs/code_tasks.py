"""The code env's rows, read as tasks: the chat that opens the episode, the code the sandbox runs before the model's,
the tests, how many of them the prompt showed, and the program's names that the tests call. Three layouts, told
apart by their fields:

- HumanEval (`entry_point`): `prompt` (a stub: imports, signature, docstring), `test` (defines check(candidate)).
  The program is the stub's text, then the model's code; the one test is the prompt's own definitions but the entry
  point's (`prompt_helpers`), then `test` + `check(<entry_point>)`, held out. So check() calls the prompt's helpers
  (HumanEval/32's `poly`, /38's `encode_cyclic`, /50's `encode_shift`) as the prompt wrote them, run in the test
  harness, never a redefinition in the model's code (issue 62).
- MBPP (`test_list`): `prompt`, `test_list` (asserts), optional `test_imports` (run before the model's code, and
  before each test, in the test harness) and `code` (the reference solution: the functions it defines are the ones
  the tests call, e.g. mbpp-126's `sum`).
  The first MBPP_SHOWN_TESTS tests are shown (envs/code_env.py), the rest held out.
- LiveCodeBench (`public_test_cases`): the rows of livecodebench/code_generation_lite as its own loader reads them
  (lcb_runner/benchmarks/code_generation.py, LiveCodeBench/LiveCodeBench at 28fef95): `question_content`,
  `starter_code`, `public_test_cases` and `private_test_cases` (JSON strings of lists of {"input", "output",
  "testtype": "stdin" | "functional"}; the private ones may also be the release's base64(zlib(pickle(JSON text)))
  form, read here by an unpickler that builds nothing but that string), `metadata` (a JSON string; "func_name"
  names the function of functional tests). The opening chat is LiveCodeBench's generic one (its system message and
  get_generic_question_template_answer, lcb_runner/prompts/code_generation.py). The program is LiveCodeBench's
  import prelude (testing_util.py's import_string, which its grader puts before every program) and the model's
  code. Tests: public then private, all scored, as LiveCodeBench grades both; the public ones (the statement's
  examples) are shown, the private ones held out: their inputs and outputs never reach the model, in the prompt or
  in the feedback (rewards/code_cases.py). A stdin test is {"stdin", "stdout"}; a functional one becomes a call
  test {"call": func_name, "args": [one JSON value per input line], "returns": the JSON output}.

A bad row is refused when the data is loaded (`check_row`), naming the file, the line and the field.
"""
import base64
import functools
import io
import json
import pickle
import zlib
from dataclasses import dataclass

from rewards.code_cases import test_kind

MBPP_SHOWN_TESTS = 1  # the paper shows all; 1 keeps the rest held out (envs/code_env.py's docstring)
INSTRUCTION = "Write the solution as a Python function in a ```python code block."
MBPP_TEMPLATE = ("You are an expert Python programmer, and here is your task: {prompt} Your code should pass these "
                 "tests:\n\n{tests}")
# LiveCodeBench's own texts (lcb_runner/prompts/code_generation.py, PromptConstants; testing_util.py, import_string)
LCB_SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
              "generate a correct Python program that matches the specification and passes all tests.")
LCB_WITH_STARTER = ("You will use the following starter code to write the solution to the problem and enclose your "
                    "code within delimiters.")
LCB_WITHOUT_STARTER = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly "
                       "test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when "
                       "the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")
LCB_IMPORTS = ("from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\nfrom heapq "
               "import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\nfrom "
               "statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\nfrom "
               "io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
               "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport "
               "copy\nimport math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport "
               "operator\nimport io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n")
LCB_TEST_TYPES = ("stdin", "functional")


class BadCodeRow(ValueError):
    """A row that is not a code task of a known layout; the message names the field."""


@dataclass(frozen=True)
class CodeTask:
    messages: list     # the chat that opens the episode
    prefix: str        # code the sandbox runs before the model's
    tests: list        # rewards.code.run_tests tests
    shown: int         # the first `shown` tests were in the prompt
    keep: tuple        # the program's names the tests call (rewards/sandbox/harness.py)


def layout(row: dict) -> str:
    if "public_test_cases" in row:
        return "livecodebench"
    return "humaneval" if "entry_point" in row else "mbpp"


def task(row: dict, prompt_key: str = "prompt") -> CodeTask:
    return {"humaneval": _humaneval, "mbpp": _mbpp, "livecodebench": _livecodebench}[layout(row)](row, prompt_key)


def check_row(location: str, row: dict) -> dict:
    """The row if it reads as a task of its layout (module docstring), else BadCodeRow naming the location and why."""
    try:
        task(row)
    except BadCodeRow as exc:
        raise BadCodeRow(f"{location}: {exc}") from None
    return row


def _user(text: str) -> list:
    return [{"role": "user", "content": text}]


def _humaneval(row: dict, prompt_key: str) -> CodeTask:
    for key in ("prompt", "test", "entry_point"):
        if not isinstance(row.get(key), str):
            raise BadCodeRow(f"a HumanEval row needs a string {key!r}")
    test = prompt_helpers(row["prompt"], row["entry_point"]) + "\n" + row["test"] + f"\ncheck({row['entry_point']})"
    return CodeTask(_user(f"{row[prompt_key]}\n\n{INSTRUCTION}"), row["prompt"] + "\n", [test], 0,
                    (row["entry_point"],))


def prompt_helpers(prompt: str, entry_point: str) -> str:
    """A HumanEval prompt's text without the entry point's definition (its stub): its imports and the helpers it
    defines, which the tests run before check() so that check() calls these, not the program's (module docstring).
    A stub cut after its signature parses with a `pass` body; any other prompt that does not parse is refused."""
    import ast
    try:
        body = ast.parse(prompt).body
    except SyntaxError as exc:
        try:
            body = ast.parse(prompt + "\n    pass\n").body
        except SyntaxError:
            raise BadCodeRow(f"a HumanEval 'prompt' that does not parse ({exc.msg}, line {exc.lineno})") from None
    lines = prompt.split("\n")
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            lines[start:node.end_lineno] = [""] * (node.end_lineno - start)  # blanks: the line numbers stay
    return "\n".join(lines)


def _defined_names(code: str) -> tuple:
    """The functions and classes a reference solution defines at its top level (what its tests call)."""
    import ast
    import warnings
    try:
        with warnings.catch_warnings():  # reference solutions with regexes in plain strings ('\w')
            warnings.simplefilter("ignore")
            body = ast.parse(code).body
    except SyntaxError:
        return ()
    return tuple(n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def _mbpp(row: dict, prompt_key: str) -> CodeTask:
    tests = row.get("test_list")
    if not (isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests)):
        raise BadCodeRow("an MBPP row needs 'test_list', a non-empty list of strings")
    shown = tests[:MBPP_SHOWN_TESTS]
    text = MBPP_TEMPLATE.format(prompt=str(row[prompt_key]).strip(), tests="\n".join(t.strip() for t in shown))
    imports = "\n".join(row.get("test_imports") or [])
    # each test runs the row's imports itself, in the harness: what it imports (`from math import isclose`) is the
    # genuine name, never one the program rebound (issue 62); the program keeps them too, as MBPP runs them
    run = [f"{imports}\n{t}" if imports else t for t in tests]
    return CodeTask(_user(f"{text}\n\n{INSTRUCTION}"), imports + "\n", run, len(shown),
                    _defined_names(row.get("code") or ""))


class _StringOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a test-case pickle names {module}.{name}: only a string is accepted")


def _cases(text: str, field: str) -> tuple:
    """One field of test cases: JSON, or LiveCodeBench's base64(zlib(pickle(JSON))) form (private cases)."""
    try:
        cases = json.loads(text)
    except ValueError:
        try:
            inner = _StringOnly(io.BytesIO(zlib.decompress(base64.b64decode(text.encode(), validate=True)))).load()
            cases = json.loads(inner) if isinstance(inner, str) else None
        except Exception as exc:
            raise BadCodeRow(f"{field!r} is neither JSON nor LiveCodeBench's compressed form ({exc})") from None
    if not isinstance(cases, list):
        raise BadCodeRow(f"{field!r} must hold a list of test cases")
    for n, case in enumerate(cases):
        if not (isinstance(case, dict) and isinstance(case.get("input"), str) and isinstance(case.get("output"), str)
                and case.get("testtype") in LCB_TEST_TYPES):
            raise BadCodeRow(f"{field!r} case {n}: expected {{'input': str, 'output': str, 'testtype': 'stdin' | "
                             f"'functional'}}, got {str(case)[:120]}")
    return tuple((c["input"], c["output"], c["testtype"]) for c in cases)


def _lcb_test(case: tuple, func_name, where: str) -> dict:
    given, expected, testtype = case
    if testtype == "stdin":
        return {"stdin": given, "stdout": expected}
    if not func_name:
        raise BadCodeRow(f"{where}: a functional test needs metadata's 'func_name'")
    try:  # as grade_call_based: one JSON value per input line, the output one JSON value
        test = {"call": func_name, "args": [json.loads(line) for line in given.split("\n")],
                "returns": json.loads(expected)}
    except ValueError as exc:
        raise BadCodeRow(f"{where}: a functional test's input lines and output must be JSON ({exc})") from None
    test_kind(test)
    return test


def _livecodebench(row: dict, prompt_key: str) -> CodeTask:
    for key in ("question_content", "public_test_cases"):
        if not isinstance(row.get(key), str):
            raise BadCodeRow(f"a LiveCodeBench row needs a string {key!r}")
    metadata = row.get("metadata") or "{}"
    tests, shown, func_name = _lcb_tests(row["public_test_cases"], row.get("private_test_cases") or "",
                                         metadata if isinstance(metadata, str) else json.dumps(metadata))
    starter = row.get("starter_code") or ""
    prompt = f"### Question:\n{row['question_content']}\n\n"  # get_generic_question_template_answer
    if starter:
        prompt += f"### Format: {LCB_WITH_STARTER}\n```python\n{starter}\n```\n\n"
    else:
        prompt += f"### Format: {LCB_WITHOUT_STARTER}\n```python\n# YOUR CODE HERE\n```\n\n"
    prompt += "### Answer: (use the provided format with backticks)\n\n"
    messages = [{"role": "system", "content": LCB_SYSTEM}, {"role": "user", "content": prompt}]
    keep = ("Solution", func_name) if func_name else ()
    return CodeTask(messages, LCB_IMPORTS + "\n", list(tests), shown, keep)


@functools.lru_cache(maxsize=64)  # a row's G responses are scored one after another: parse its cases once
def _lcb_tests(public_text: str, private_text: str, metadata_text: str) -> tuple:
    """(tests, how many are public, func_name) of one LiveCodeBench row's fields."""
    public = _cases(public_text, "public_test_cases")
    private = _cases(private_text, "private_test_cases") if private_text else ()
    if not public + private:
        raise BadCodeRow("a LiveCodeBench row without test cases")
    try:
        metadata = json.loads(metadata_text)
    except ValueError as exc:
        raise BadCodeRow(f"'metadata' is not JSON ({exc})") from None
    func_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    tests = [_lcb_test(c, func_name, f"public_test_cases case {n}") for n, c in enumerate(public)]
    tests += [_lcb_test(c, func_name, f"private_test_cases case {n}") for n, c in enumerate(private)]
    return tuple(tests), len(public), func_name
