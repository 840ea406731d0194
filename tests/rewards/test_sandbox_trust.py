"""Issue 62's attacks on the test harness (rewards/sandbox/harness.py), each a class with variants of its own: the
tests' namespace reached through a `__builtins__` of the program's, the prompt's helpers redefined, and the edge forms
(StopIteration steering a test's loop, NaN passing a negated comparison). Every wrong program here scored 1.00
before the fix; real MBPP and HumanEval rows where the attack targets one."""
import builtins
import json
import os

import pytest

from envs.code_env import CodeVerifier
from envs.code_tasks import prompt_helpers
from rewards.code import run_many, run_tests
from tests.helpers import REPO_ROOT

LIMITS = dict(timeout_s=10.0)


def rows(path, key):
    with open(os.path.join(REPO_ROOT, "data", path)) as f:
        return {row[key]: row for row in map(json.loads, f)}


MBPP = rows("mbpp/sanitized.jsonl", "id")
HUMANEVAL = rows("humaneval/test.jsonl", "task_id")


def scores(jobs: list) -> list:
    """The code env's score of each (row, model code) job, run as the env runs it."""
    return [r.score for r in run_many([CodeVerifier.program_and_tests(code, row) for row, code in jobs], workers=2,
                                      **LIMITS)]


# --- 1. the tests' namespace: a `__builtins__` of the program's ---------------------------------------------------

YES = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
# A str subclass whose str() is "__builtins__" but which is not equal to it: a key of its own in the program's
# globals, past the program-side filter (its startswith('__') is False), arriving in the harness as "__builtins__"
STR_KEY = "class Key(str):\n    def __str__(self):\n        return '__builtins__'\n"
NAMESPACE_ATTACKS = {
    "str_subclass_key": (MBPP["mbpp-2"], "def similar_elements(a, b):\n    return ()\n" + YES + STR_KEY +
                         "import builtins\nglobals()[Key('k')] = {**vars(builtins), 'set': lambda *a: Yes()}\n"),
    "object_answering_every_lookup": (
        MBPP["mbpp-7"], "def find_char_long(text):\n    return []\n" + YES + STR_KEY +
        "import builtins\nclass Lookup:\n    def __getitem__(self, name):\n"
        "        return (lambda *a: Yes()) if name == 'set' else getattr(builtins, name)\n"
        "globals()[Key('k')] = Lookup()\n"),
    "rewritten_globals_reply": (
        MBPP["mbpp-2"], "def similar_elements(a, b):\n    return ()\n" + YES +
        "import sys, builtins\nwire = sys._getframe(1).f_globals['wire']\nreal = wire.encode\n"
        "def encode(value, as_handle, depth=0):\n    if type(value) is dict and 'similar_elements' in value:\n"
        "        value = {**value, '__builtins__': {**vars(builtins), 'set': lambda *a: Yes()}, '__name__': 'x'}\n"
        "    return real(value, as_handle, depth)\nwire.encode = encode\n"),
    "test_imports_name": ({**MBPP["mbpp-82"], "test_imports": ["from math import isclose"],
                           "test_list": [t.replace("math.isclose", "isclose") for t in MBPP["mbpp-82"]["test_list"]]},
                          "def volume_sphere(r):\n    return 0\nisclose = lambda *a, **k: True\n"),
    "humaneval_tuple": (HUMANEVAL["HumanEval/33"], "    return l\n" + YES + STR_KEY +
                        "import builtins\nglobals()[Key('k')] = {**vars(builtins), 'tuple': lambda *a: Yes()}\n"),
}


def test_a_program_cannot_hand_the_tests_a_builtins_of_its_own():
    names = sorted(NAMESPACE_ATTACKS)
    assert dict(zip(names, scores([NAMESPACE_ATTACKS[n] for n in names]))) == {n: 0.0 for n in names}


def test_the_namespace_is_built_from_plain_names_only_with_the_genuine_builtins_bound_last():
    from rewards.sandbox import harness

    class Sneaky(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    given = {"f": 1, "__builtins__": {"len": 2}, "__name__": "fake", Sneaky("len2"): 3, ("t",): 4, "not ok": 5,
             "__x": 6, "len": 7, "_private": 8}
    namespace = harness.test_namespace(given, frozenset(), ["assert f"])
    assert namespace == {"f": 1, "_private": 8, "__name__": "__main__", "__builtins__": builtins}
    assert list(namespace)[-1] == "__builtins__" and namespace["__builtins__"] is builtins
    with pytest.raises(harness.wire.ProtocolError, match="came back as a list"):
        harness.test_namespace([("f", 1)], frozenset(), [])


# --- 2. the prompt's helpers, redefined by the completion ---------------------------------------------------------

HELPER_ATTACKS = {  # a wrong entry point that a redefined helper would make pass
    "HumanEval/32": "    return 0.0\n\ndef poly(xs, x):\n    return 0\n",
    "HumanEval/38": "    return s\n\ndef encode_cyclic(s):\n    return s\n",
    "HumanEval/50": "    return s\n\nencode_shift = lambda s: s\n",
    "HumanEval/50 through globals()": "    return s\n\nglobals()['encode_shift'] = str\n",
}


def test_a_completion_cannot_redefine_the_helpers_check_calls():
    jobs = [(HUMANEVAL[key.split()[0]], code) for key, code in HELPER_ATTACKS.items()]
    right = [(HUMANEVAL[key], HUMANEVAL[key]["canonical_solution"]) for key in ("HumanEval/32", "HumanEval/38",
                                                                              "HumanEval/50", "HumanEval/10")]
    assert scores(jobs + right) == [0.0] * len(jobs) + [1.0] * len(right)


def test_the_prompts_helpers_are_its_text_without_the_entry_points_stub():
    helpers = prompt_helpers(HUMANEVAL["HumanEval/32"]["prompt"], "find_zero")
    assert "def poly(" in helpers and "import math" in helpers and "find_zero" not in helpers
    assert prompt_helpers("import math\n\ndef f(x):\n", "f").strip() == "import math"  # a stub cut at its signature


# --- 4. edge forms: StopIteration steering the test's loop, NaN passing negated comparisons -------------------------

STOPS = "def f(*args):\n    raise StopIteration\n"
STOP_TESTS = ["assert all(map(f, [1, 2, 3]))", "assert not any(map(f, [1, 2]))",
              "assert set(map(f, [1, 2])) <= {1, 2}", "assert all(a == b for a, b in zip(map(f, [1, 2]), [3, 4]))",
              "try:\n    f(1)\nexcept StopIteration:\n    pass\nelse:\n    assert False"]


def test_a_program_raising_stopiteration_fails_the_tests_instead_of_ending_their_loops():
    result = run_tests(STOPS, STOP_TESTS, **LIMITS)
    assert result.passed == 0 and all("StopIteration raised by the program" in o for o in result.outcomes), result


# (program, the test's expression for its NaN): a float, one inside a list, a dict value, a complex
NAN_PROGRAMS = {"float": ("def f(*a):\n    return float('nan')\n", "f(1)"),
                "in_a_list": ("def f(*a):\n    return [1.0, float('nan')]\n", "f(1)[1]"),
                "in_a_dict": ("def f(*a):\n    return {'x': (float('nan'),)}\n", "f(1)['x'][0]"),
                "complex": ("def f(*a):\n    return complex(float('nan'), 0)\n", "f(1)")}
NAN_TESTS = ["assert not abs({x} - 2.5) > 1e-6", "assert not (abs({x} - 2.5) >= 1e-6)",
             "assert not abs(round(({x}).real, 2) - 2.5) > 1e-6", "assert not max(abs({x} - 2.5), 0) > 1e-6"]


@pytest.mark.parametrize("name", sorted(NAN_PROGRAMS))
def test_a_nan_fails_every_negated_tolerance_test(name):
    program, expression = NAN_PROGRAMS[name]
    result = run_tests(program, [test.format(x=expression) for test in NAN_TESTS], **LIMITS)
    assert (result.status, result.passed) == ("ok", 0), (name, result.outcomes)


def test_a_nan_is_still_a_nan_to_math_isnan_and_a_call_tests_wrong_answer():
    program = "def f(*a):\n    return float('nan')\n"
    result = run_tests(program, ["import math\nassert math.isnan(f(1)) and math.isnan(round(f(1) * 2, 2))",
                                 {"call": "f", "args": [1], "returns": 2.5}], **LIMITS)
    assert result.outcomes == [None, "wrong answer: returned nan"], result
