"""BFCL's own AST checker (PyPI `bfcl-eval`, pinned), imported without its provider SDKs, and ToolRL's partial credit.

Install: `pip install --no-deps bfcl-eval==2026.3.23` (scripts/setup.sh does). Not a normal requirement: the
package's declared dependencies pull every provider SDK and a CUDA torch, and pin numpy 1.26; the checker itself
needs none of them (numpy 2 is fine).

Why a stub: `bfcl_eval/eval_checker/ast_eval/ast_checker.py` line 4 imports `MODEL_CONFIG_MAPPING` from
`bfcl_eval.constants.model_config`, which imports every model handler (anthropic, openai, cohere, qwen-agent, ...)
and `constants/eval_config.py`, which creates result/, score/ and .file_locks/ folders next to site-packages. The
checker reads that mapping for one field only, `underscore_to_dot` (whether the model's function names have "."
replaced by "_"). `ast_checker_module()` puts a stub module answering False for every model into sys.modules for
the one import and removes it afterwards: only the standard library loads and nothing is written.
tests/rewards/test_rewards_toolcall.py scores a real BFCL row right and wrong, so a version whose imports change
fails CI instead of scoring silently.
"""
import functools
import importlib
import importlib.util
import os
import sys
import types

BFCL_VERSION = "2026.3.23"
INSTALL_HINT = f"pip install --no-deps bfcl-eval=={BFCL_VERSION} (scripts/setup.sh does)"
CHECKER_MODULE = "bfcl_eval.eval_checker.ast_eval.ast_checker"
_MODEL_CONFIG = "bfcl_eval.constants.model_config"
MODEL_NAME = "credo"  # the checker wants a model name; the stub answers underscore_to_dot=False for any
# BFCL v4's single-turn categories with possible answers (the AST checker scores them), and those whose right answer
# is no call at all (BFCL ships no answer file for them)
AST_CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance")


class BfclMissing(ImportError):
    """bfcl-eval is not installed (the message says how to install it)."""


def bfcl_package_dir() -> str:
    """The installed bfcl_eval folder, found without importing it (bfcl_eval.utils would create folders)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BfclMissing(f"BFCL's checker and data come from the bfcl-eval package: {INSTALL_HINT}")
    return next(iter(spec.submodule_search_locations))


def bfcl_data_dir() -> str:
    return os.path.join(bfcl_package_dir(), "data")


@functools.lru_cache(maxsize=None)
def ast_checker_module():
    """bfcl_eval's ast_checker module, imported with a stub model_config (see the module docstring)."""
    if CHECKER_MODULE in sys.modules:
        return sys.modules[CHECKER_MODULE]
    bfcl_package_dir()  # a readable error when the package is missing
    settings = types.SimpleNamespace(underscore_to_dot=False)

    class AnyModel(dict):
        def __missing__(self, key):
            return settings

    stub = types.ModuleType(_MODEL_CONFIG)
    stub.MODEL_CONFIG_MAPPING = AnyModel()
    previous = sys.modules.get(_MODEL_CONFIG)
    sys.modules[_MODEL_CONFIG] = stub
    try:
        return importlib.import_module(CHECKER_MODULE)
    finally:  # the checker holds the stub mapping now; nothing else may see it
        if previous is None:
            sys.modules.pop(_MODEL_CONFIG, None)
        else:
            sys.modules[_MODEL_CONFIG] = previous


def language_of(category: str, language: str = None):
    """bfcl's Language enum: a row's own "language" field, else from the category (simple_java / simple_javascript)."""
    from bfcl_eval.constants.enums import Language  # standard library only
    name = (language or ("javascript" if "javascript" in category else "java" if "java" in category
                         else "python")).lower()
    return Language(name)


GORILLA_FLOAT_NOTE = " This is a float type value."  # what BFCL's convert_to_tool adds to a float's description


def openapi_type(gorilla_type: str) -> str:
    """A BFCL (Gorilla) schema type as a JSON-schema type (bfcl's GORILLA_TO_OPENAPI; an unknown one is a string)."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # standard library only
    return GORILLA_TO_OPENAPI.get(gorilla_type, "string")


def checker_route(row: dict) -> str:
    """The category BFCL's checker routes a row by: its own "category" when that is one of BFCL's, else inferred from
    the answer's shape (credo's reading, for a user's rows): no call -> irrelevance; several calls -> parallel (order-
    free); one call among several functions -> multiple; one call of one function -> simple_python."""
    category = row.get("category")
    if category in AST_CATEGORIES or category in IRRELEVANCE_CATEGORIES:
        return category
    calls, functions = row.get("ground_truth") or [], row.get("function") or []
    if not calls:
        return "irrelevance"
    if len(calls) > 1:
        return "parallel_multiple" if len(functions) > 1 else "parallel"
    return "multiple" if len(functions) > 1 else "simple_python"


def check_calls(functions: list, calls: list, ground_truth: list, route: str, language: str = None) -> dict:
    """bfcl's verdict {"valid": bool, "error": [...], "error_type": str} on decoded calls.

    functions: the row's "function" list as BFCL ships it (Gorilla types; the checker reads them, not the prompt's
    OpenAPI view); calls: [{name: {argument: value}}]; ground_truth: the answer row's list; route: the category
    the checker routes on ("parallel" in it: order-free; "multiple": one call among several functions; else one
    call). A checker exception (an odd value type it does not expect) is a wrong call, not a crash.
    """
    checker = ast_checker_module()
    try:
        return checker.ast_checker(functions, calls, ground_truth, language_of(route, language), route, MODEL_NAME)
    except Exception as exc:  # noqa: BLE001 - the checker's own assumptions about a model's values
        return {"valid": False, "error": [f"{type(exc).__name__}: {exc}"], "error_type": "checker_exception"}


# --- ToolRL's partial credit (Qian et al. 2025, arXiv 2504.13958, section 3.3 and its rlla.py), on BFCL answers ---

def match_score(a: list, b: list) -> float:
    """ToolRL's set overlap with multiplicity: |a & b| / (|a| + |b| - |a & b|); 1 when both are equal."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    rest, common = list(b), 0
    for x in a:
        if x in rest:
            rest.remove(x)
            common += 1
    return common / (len(a) + len(b) - common)


def _accepted(value, accepted: list) -> bool:
    """Whether `value` is one of BFCL's accepted values, strings compared as the checker compares them."""
    standardize = ast_checker_module().standardize_string
    for option in accepted:
        if option == "":
            continue
        if isinstance(value, str) and isinstance(option, str):
            if standardize(value) == standardize(option):
                return True
        elif value == option:
            return True
    return False


def toolrl_partial_credit(calls: list, ground_truth: list, low: float = -3.0, high: float = 3.0) -> float:
    """ToolRL's correctness reward R_correct in [low, high] for calls that BFCL's checker did not accept.

    ToolRL: S = match_score(tool names) + sum over expected calls of the best unused predicted call of the same name's
    match_score(argument names) + (number of argument values equal to the expected ones); S_max = 1 + sum over
    expected calls of (1 + number of their arguments); R = (high - low) * S / S_max + low. credo's reading for BFCL's
    answers, which list accepted values per argument: an expected argument is one whose accepted values do not
    include "" (BFCL's "may be omitted"), and a value counts when it is one of the accepted ones (strings compared as
    BFCL's checker does). A call the checker accepts gets `high` (ToolRL's exact match) from the caller.

    calls: [{name: {argument: value}}]; ground_truth: BFCL's [{name: {argument: [accepted values]}}].
    """
    expected = [(name, {k: v for k, v in args.items() if "" not in v})
                for call in ground_truth for name, args in call.items()]
    predicted = [(name, args) for call in calls for name, args in call.items()]
    score = match_score([n for n, _ in expected], [n for n, _ in predicted])
    best_possible = 1.0
    used = set()
    for name, arguments in expected:
        best_possible += 1.0 + len(arguments)
        best, best_index = 0.0, None
        for i, (p_name, p_args) in enumerate(predicted):
            if i in used or p_name != name or not isinstance(p_args, dict):
                continue
            total = match_score(list(arguments), list(p_args)) + sum(
                1.0 for k, accepted in arguments.items() if k in p_args and _accepted(p_args[k], accepted))
            if total > best:
                best, best_index = total, i
        if best_index is not None:
            used.add(best_index)
            score += best
    return (high - low) * score / best_possible + low
