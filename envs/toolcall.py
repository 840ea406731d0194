"""--env toolcall: BFCL v4's single-turn function calling in ToolRL's layout, scored by BFCL's own AST checker.

The prompt (credo's reading, shortened for a small model, of ToolRL's system prompt: Qian et al. 2025, arXiv
2504.13958, the prompt of its released RL data; DARA sections 4.1 and C.2 follow ToolRL) gives the row's tools as JSON
schemas, one per line, and asks for
    <think>short reasoning</think>
    <tool_call>
    {"name": "function name", "parameters": {"argument": value}}
    </tool_call>
with one JSON object per call per line. The tools are shown as BFCL's own inference shows them (its
`_func_doc_language_specific_pre_processing` and `convert_to_tool`, rewritten here: credo's reading): a language note
on each description, Gorilla types mapped to JSON-schema types (bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI:
dict -> object, float -> number, tuple -> array), and for Java / JavaScript every argument typed as a string of
source code. The checker itself reads the row's original schema. With --toolcall_example (the default; credo's
reading, docs/toolcall.md has the measurement) two worked examples with other functions precede the question as chat
turns; --no-toolcall_example gives ToolRL's and DARA's prompt without them.

A turn's score is 1 when BFCL's checker accepts the parsed calls (rewards/toolcall.ToolCallVerifier), else 0: the
`correctness` reward. Each step reports the components format and correct (env/format/mean, env/correct/mean), the
numeric info `parsed` and `calls`, and, as text, `parse_error` ("code: detail", e.g. "bad_json: call line 1: ...")
and BFCL's `error_type`; `episode_record()` keeps them with the question's id and category for eval.py's
results.json and train.py's completions.jsonl (each record's "env"). The episode is one turn (--max_turns 1).

Data (envs/toolcall_data.py): BFCL's ten single-turn categories with answers from the installed bfcl-eval package
(--toolcall_categories, irrelevance with --toolcall_irrelevance), or your own JSONL in the same schema
(--toolcall_data FILE; a bad row is named by file and line), split by crc32(id) % 10 < 2 into held-out (eval.py's
default set) and train. `--data_path FILE` also works: every row used as it is, no split.

eval.py reports per category `toolcall/accuracy/<category>` and `toolcall/format/<category>`, and their means over
categories, `toolcall/Avg Accuracy` and `toolcall/Avg Format`, as DARA's Table 1 (with binomial standard errors).
"""
import argparse
import copy
import json
import logging

from envs.base import Env, StepResult, register_env
from envs.toolcall_data import (LANGUAGES, ToolCallDataError, category_names, check_row, question_messages,
                                toolcall_rows, user_rows)
from rewards.bfcl import BfclMissing, GORILLA_FLOAT_NOTE, checker_route, openapi_type
from rewards.toolcall import ToolCallVerifier

logger = logging.getLogger(__name__)
# Prompts carry the tools' schemas: with SmolLM2's tokenizer and the worked examples, 450 to 6,100 tokens, median 800
# (BFCL's train and held-out splits); below this, --max_prompt_seq_len cuts the longer ones from the left.
PROMPT_TOKENS_ADVISED = 4096

INSTRUCTIONS = """You are a helpful assistant that answers the user by calling functions.

Available functions (JSON schemas, one per line):
{tools}

Answer in exactly this format:
<think>your short reasoning</think>
<tool_call>
{{"name": "function name", "parameters": {{"argument name": "argument value"}}}}
</tool_call>

Rules:
1. Always start with <think>...</think>.
2. Inside <tool_call>, write one JSON object per call, each on its own line; for several calls, write several lines.
3. Use only the functions listed above and the argument names of their schemas; give values of the schema's types."""
NO_CALL_RULE = """
4. If none of the functions fits the request, answer <think>...</think> and then <response>your reply</response> \
instead of <tool_call>."""
# credo's reading: worked examples as earlier chat turns, for a model that alone rarely writes the layout
# (docs/toolcall.md has the measurement that decided it). Their functions are not the row's (nothing of the answer
# leaks); each think has under 16 words, as DARA's think_length reward wants. Chat turns, not text in the system
# message: on SmolLM2-135M the latter changed nothing (0 of 8 parsed) and the former made it write the blocks.
EXAMPLES = [
    ("What is the weather in Paris in celsius?",
     '<think>The user wants Paris weather in celsius; get_weather fits.</think>\n<tool_call>\n'
     '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'),
    ("Convert 5 miles and 12 miles to kilometers.",
     '<think>Two conversions; call convert_distance twice.</think>\n<tool_call>\n'
     '{"name": "convert_distance", "parameters": {"value": 5, "from_unit": "mile", "to_unit": "km"}}\n'
     '{"name": "convert_distance", "parameters": {"value": 12, "from_unit": "mile", "to_unit": "km"}}\n</tool_call>'),
]
NO_CALL_EXAMPLE = ("Tell me a joke about cats.",
                   "<think>No listed function tells jokes.</think>\n<response>Sorry, I have no function for "
                   "that.</response>")
LANGUAGE_NOTES = {"python": " Note that the provided function is in Python 3 syntax.",
                  "java": " Note that the provided function is in Java 8 SDK syntax.",
                  "javascript": " Note that the provided function is in JavaScript syntax."}
LANGUAGE_NAMES = {"java": "Java", "javascript": "JavaScript"}


def row_language(row: dict) -> str:
    route = checker_route(row)
    return row.get("language") or ("javascript" if "javascript" in route else "java" if "java" in route
                                   else "python")


def _openapi_properties(properties: dict) -> dict:
    """BFCL's _cast_to_openai_type, recursive: Gorilla types -> JSON-schema types; float gets BFCL's note."""
    for value in properties.values():
        kind = value.get("type", "string")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + GORILLA_FLOAT_NOTE
        value["type"] = openapi_type(kind)
        if isinstance(value.get("properties"), dict):
            _openapi_properties(value["properties"])
        items = value.get("items")
        if isinstance(items, dict):
            _openapi_properties({"items": items})
    return properties


def _as_source_strings(properties: dict, language: str) -> None:
    """BFCL's Java / JavaScript view: every argument is a string of source code, its type named in the description."""
    name = LANGUAGE_NAMES[language]
    for value in properties.values():
        kind = value.get("type", "any")
        if kind == "any":
            value["description"] = value.get("description", "") + \
                f" This parameter can be of any type of {name} object in string representation."
        else:
            value["description"] = value.get("description", "") + \
                f" This is {name} {kind} type parameter in string representation."
        if kind in ("ArrayList", "Array", "array") and isinstance(value.get("items"), dict):
            value["description"] += (f" The list elements are of type {value['items'].get('type')}; they are not in "
                                     f"string representation.")
            del value["items"]
        if language == "javascript" and kind == "dict" and "properties" in value:
            value["description"] += (f" The dictionary entries have the following schema; they are not in string "
                                     f"representation. {json.dumps(value.pop('properties'))}")
        value["type"] = "string"


def openapi_tools(functions: list, language: str = "python") -> list:
    """The row's tools as the model sees them: a copy, BFCL's language note added, types as JSON schema."""
    tools = copy.deepcopy(functions)
    for tool in tools:
        tool["description"] = tool.get("description", "") + LANGUAGE_NOTES[language]
        parameters = tool.setdefault("parameters", {})
        properties = parameters.setdefault("properties", {})
        if language in LANGUAGE_NAMES:
            _as_source_strings(properties, language)
        parameters["type"] = "object"
        _openapi_properties(properties)
    return tools


def prompt_messages(row: dict, no_call_rule: bool = False, example: bool = False) -> list:
    """The chat that opens an episode: the system message (instructions, tools, the row's own system text), the
    worked examples when `example`, and the question's other messages (the last is the user's question)."""
    tools = "\n".join(json.dumps(t, ensure_ascii=False) for t in openapi_tools(row["function"], row_language(row)))
    system = INSTRUCTIONS.format(tools=tools) + (NO_CALL_RULE if no_call_rule else "")
    messages = question_messages(row["question"])
    own_system = [m["content"] for m in messages if m["role"] == "system"]
    if own_system:
        system += "\n\n" + "\n\n".join(own_system)
    shots = []
    if example:
        for question, reply in EXAMPLES + ([NO_CALL_EXAMPLE] if no_call_rule else []):
            shots += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    return [{"role": "system", "content": system}] + shots + [dict(m) for m in messages if m["role"] != "system"]


def target_reply(row: dict) -> str:
    """A reply BFCL's checker accepts, in the prompt's layout, for a warm start (credo's reading): a short <think>
    naming the functions (under 16 words, as DARA's think_length asks), then each expected call with, per argument,
    its first accepted value ("" among a row's values marks an optional argument, left out when nothing else is
    accepted). A row whose answer is no call gets the <response> reply of the no-call rule."""
    calls = []
    for call in row["ground_truth"]:
        (name, arguments), = call.items()
        values = {k: next(v for v in accepted if v != "") for k, accepted in arguments.items()
                  if any(v != "" for v in accepted)}
        calls.append(json.dumps({"name": name, "parameters": values}, ensure_ascii=False))
    if not calls:
        return "<think>No listed function fits the request.</think>\n<response>Sorry, none of my functions can do " \
               "that.</response>"
    names = list(dict.fromkeys(json.loads(c)["name"] for c in calls))
    think = (f"The request fits {names[0]}." if len(calls) == 1 else
             f"This needs {len(calls)} calls to {names[0]}." if len(names) == 1 else
             f"This needs {', '.join(names[:3])}.")
    return f"<think>{think}</think>\n<tool_call>\n" + "\n".join(calls) + "\n</tool_call>"


@register_env("toolcall")
class ToolCallEnv(Env):
    """One question, one answer: the response's calls judged by BFCL's AST checker (module docstring)."""
    default_max_answer_seq_len = 256   # credo's reading: a short think and a few one-line calls
    default_max_prompt_seq_len = PROMPT_TOKENS_ADVISED  # the tools' schemas whole (train.py's 256 cut them)
    default_prompt_key = "question"    # BFCL's fields; --prompt_key / --answer_key are not read
    default_answer_key = "ground_truth"
    default_eval_data = None           # the held-out split of the package's data: dataset("eval", ...)

    def __init__(self, categories: str = "all", irrelevance: bool = False, data: str = None, example: bool = True,
                 max_schema_chars: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.no_call_rule, self.example = irrelevance, example
        self.sample = self.verdict = None

    @classmethod
    def make_verifier(cls, **kwargs):
        return ToolCallVerifier()

    @classmethod
    def data_keys(cls, prompt_key, answer_key) -> tuple:
        return ("question", "function", "ground_truth")

    @classmethod
    def dataset(cls, split, n, seed, categories="all", irrelevance=False, data=None, max_schema_chars=0, **unused):
        return toolcall_rows(split, n, seed, categories=categories, irrelevance=irrelevance, data=data,
                             max_schema_chars=max_schema_chars)

    @classmethod
    def settings_from_args(cls, args) -> dict:
        # getattr: a parser without this env's flags (add_toolcall_env_flags) runs with the defaults
        return {"categories": getattr(args, "toolcall_categories", "all"),
                "irrelevance": getattr(args, "toolcall_irrelevance", False),
                "data": getattr(args, "toolcall_data", None), "example": getattr(args, "toolcall_example", True),
                "max_schema_chars": getattr(args, "toolcall_max_schema_chars", 0)}

    @classmethod
    def check_flags(cls, args, bad) -> None:
        if getattr(args, "max_turns", 1) != 1:
            bad(f"--env toolcall plays one turn per question (BFCL's single-turn categories): --max_turns must be 1, "
                f"got {args.max_turns}")
        length = getattr(args, "max_prompt_seq_len", None)
        if length is not None and length < PROMPT_TOKENS_ADVISED:
            logger.warning("--env toolcall: prompts hold the tools' JSON schemas (median about 800 tokens, up to about "
                           "6,100 with BFCL's live_multiple); --max_prompt_seq_len %d cuts longer ones from the left, "
                           "instructions first. Pass --max_prompt_seq_len %d to keep them whole, or fewer "
                           "--toolcall_categories.", length, PROMPT_TOKENS_ADVISED)
        settings = cls.settings_from_args(args)
        if settings["max_schema_chars"] < 0:
            bad(f"--toolcall_max_schema_chars must be >= 0 (0 = no cap), got {settings['max_schema_chars']}")
        try:
            if settings["data"]:
                user_rows(settings["data"])
            else:
                category_names(settings["categories"], settings["irrelevance"])
                cls.dataset("eval", 1, 0, **settings)
        except (ValueError, BfclMissing) as exc:  # ToolCallDataError is a ValueError
            flag = "--toolcall_data" if settings["data"] else "--toolcall_categories"
            bad(f"{flag}: {exc}")
        if settings["max_schema_chars"] and not all(cls.dataset(split, 1, 0, **settings) for split in ("train", "eval")):
            bad(f"--toolcall_max_schema_chars {settings['max_schema_chars']} leaves no question in the train or the "
                f"held-out split of these categories: raise it, or 0 for no cap")

    def reset(self, sample: dict) -> list:
        check_row(sample, f"row {sample.get('id')!r}")  # --data_path rows arrive unchecked beyond their keys
        self.sample, self.verdict = sample, None
        return prompt_messages(sample, self.no_call_rule, self.example)

    def score_turn(self, model_text: str) -> float:
        return self.verifier(None, model_text, self.sample)

    def sft_target(self, row: dict) -> str:
        return target_reply(row)

    def step(self, model_text: str) -> StepResult:
        self.verdict = v = self.verifier.judge(model_text, self.sample)
        return StepResult(observation=[], score=float(v.correct), done=True,
                          components={"format": float(v.format_ok), "correct": float(v.correct)},
                          info={"parsed": float(v.format_ok), "calls": float(len(v.calls or [])),
                                "parse_error": v.parse_error or "", "error_type": v.error_type or ""})

    def episode_record(self) -> dict:
        if self.sample is None or self.verdict is None:
            return {}
        v = self.verdict
        return {"id": self.sample.get("id"), "category": self.sample.get("category") or checker_route(self.sample),
                "format": int(v.format_ok), "correct": int(v.correct), "parse_error": v.parse_error,
                "error_type": v.error_type, "error": v.error, "calls": len(v.calls or [])}

    @classmethod
    def eval_metrics(cls, records: list) -> dict:
        return toolcall_metrics([r for r in records if "category" in r and "correct" in r])


def _mean_and_se(values: list) -> tuple:
    p = sum(values) / len(values)
    return p, (p * (1 - p) / len(values)) ** 0.5


def toolcall_metrics(records: list) -> dict:
    """Per category: accuracy (BFCL's checker), format rate and count; DARA's Table 1 averages over categories
    ("Avg Accuracy", "Avg Format", each category weighing the same) with binomial standard errors
    (sqrt(sum_c p_c (1 - p_c) / n_c) / C; samples of one question are counted as independent)."""
    by_category = {}
    for r in records:
        by_category.setdefault(r["category"], []).append(r)
    if not by_category:
        return {}
    m, accuracy, fmt = {}, [], []
    for category in sorted(by_category):
        rows = by_category[category]
        accuracy.append(_mean_and_se([r["correct"] for r in rows]) + (len(rows),))
        fmt.append(_mean_and_se([r["format"] for r in rows]) + (len(rows),))
        m[f"toolcall/accuracy/{category}"], m[f"toolcall/format/{category}"] = accuracy[-1][0], fmt[-1][0]
        m[f"toolcall/n/{category}"] = float(len(rows))
    for name, values in (("Accuracy", accuracy), ("Format", fmt)):
        c = len(values)
        m[f"toolcall/Avg {name}"] = sum(p for p, _, _ in values) / c
        m[f"toolcall/Avg {name}/se"] = sum(se ** 2 for _, se, _ in values) ** 0.5 / c
    return m


def add_toolcall_env_flags(parser):
    g = parser.add_argument_group("tool calling (--env toolcall; docs/toolcall.md)")
    g.add_argument("--toolcall_categories", default="all",
                   help="BFCL v4 single-turn categories, a comma list or all: simple_python, simple_java, "
                        "simple_javascript, multiple, parallel, parallel_multiple and their live_ versions "
                        "(live_simple, live_multiple, live_parallel, live_parallel_multiple)")
    g.add_argument("--toolcall_irrelevance", action="store_true",
                   help="add BFCL's irrelevance and live_irrelevance questions (the right answer is no call: "
                        "<response> instead of <tool_call>, which the prompt then offers)")
    g.add_argument("--toolcall_data", default=None,
                   help="your own tool-call JSONL (comma list) instead of BFCL's, in the same schema, split by the "
                        "same id hash (envs/toolcall_data.py; a bad row is named by file and line)")
    g.add_argument("--toolcall_max_schema_chars", type=int, default=0,
                   help="keep only questions whose tools' JSON schemas take at most this many characters, in the "
                        "train and held-out splits alike (0 = all; credo's cost cap for CPU runs: BFCL's median is "
                        "about 520 for simple_python and 1,350 for multiple)")
    g.add_argument("--toolcall_example", action=argparse.BooleanOptionalAction, default=True,
                   help="credo's reading: two worked examples (other functions) as earlier chat turns, without which "
                        "the default 135M model never wrote the layout (docs/toolcall.md); ToolRL and DARA prompt "
                        "without them: --no-toolcall_example")


__all__ = ["ToolCallEnv", "ToolCallDataError", "LANGUAGES", "add_toolcall_env_flags", "openapi_tools",
           "prompt_messages", "toolcall_metrics"]
