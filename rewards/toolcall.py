"""Tool calls in ToolRL's layout, judged by BFCL's checker, and DARA's rewards: tool_format, tool_correct, think_length,
length_budget.

The layout (ToolRL, Qian et al. 2025, arXiv 2504.13958, section 3.1 and its format reward): a `<think>...</think>`
block, then a `<tool_call>` block holding one JSON object {"name": ..., "parameters": {...}} per call, one per line;
a row whose right answer is no call (BFCL's irrelevance) takes `<response>...</response>` instead of `<tool_call>`,
as ToolRL's format reward makes the expected blocks depend on the answer.

`parse_response` is strict: each tag at most once, nothing before `<think>` or after the closing tag, every line of
the call block one JSON object with exactly the keys "name" (a string) and "parameters" (an object). credo's reading:
whitespace between the blocks is free (ToolRL's regular expression wants exactly one newline); one call per line
and the two keys are ToolRL's. A failure says why ("code: detail"), which the env records per episode.

The rewards (`--reward_funcs`, each built by name in rewards/registry.py from the flags of
`add_toolcall_reward_flags`):
- tool_format: 1 when the response parses in the layout its row expects (DARA section C.2, ToolRL's R_format), else 0.
  credo's stricter reading: the parse also needs every call line to be a JSON object with exactly "name" and
  "parameters". ToolRL's format reward (and DARA's copy, zhaihaotian/DARA@0459102 tool_calling/vendor/verl/verl/
  utils/reward_score/rlla.py customize_format_reward_func) is a regular expression over the tags alone; the JSON is
  checked in their correctness reward (customize_correctness_reward_tool: a call line json.loads refuses scores its
  minimum, -3). So a well-tagged response with a broken call line scores 1 on their format, 0 on credo's.
- tool_correct: 1 when BFCL's AST checker accepts the parsed calls (rewards/bfcl.py), else 0; on a no-call row, 1
  when the response parses with `<response>` and no call (credo's default, "ast"). `--tool_correct_mode toolrl`
  gives ToolRL's partial credit in [-3, 3] instead (rewards/bfcl.toolrl_partial_credit; 3 for a call the checker
  accepts, -3 for a response that does not parse, 0 on a no-call row, as ToolRL scores rows without a tool call);
  that is the correctness reward the DARA authors' code trains with (customize_correctness_reward_tool, above);
  BFCL's checker is what they evaluate with.
- think_length: 1 when the last `<think>` block has at most `--think_length_limit` (16) whitespace-separated words,
  0 when it is longer or a tag is missing (DARA section C.3). The block is read as DARA's code reads it
  (rlla.py customize_length_reward_func, same commit; the GD²PO authors' rlla.py reads it the same way): the text
  after the last `<think>` up to the next `</think>`, when both tags occur somewhere in the response.
- length_budget: 1 when the response has at most `--length_budget_tokens` generated tokens, else 0 (DARA section
  4.2's binary budget reward). It counts the sampled token ids (TRL's completion_ids, the EOS included). The
  `length` reward (words before the final answer, --length_limit) keeps its meaning.
"""
import json
from dataclasses import dataclass

from rewards.bfcl import check_calls, checker_route, toolrl_partial_credit

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>")
CALL_KEYS = ("name", "parameters")
DEFAULT_THINK_LIMIT = 16  # DARA section C.3
TOOLRL_RANGE = (-3.0, 3.0)  # ToolRL's R_correct
# credo's reading: no BFCL answer nests near this (a call object, its parameters, a few levels of arguments); a call
# deeper than this is refused as malformed, so that nothing the checker or a log does with it can recurse too far
MAX_DEPTH = 32


@dataclass(frozen=True)
class Parsed:
    think: str = None
    calls: list = None      # [{"name": str, "parameters": dict}] in the order written; None when not parsed
    response: str = None    # the <response> text of a no-call answer
    error: str = None       # "code: detail" when the strict parse failed, else None


def _depth(value) -> int:
    """How deep a decoded JSON value nests (a scalar: 0), level by level, without recursion."""
    depth, level = 0, [value]
    while True:
        level = [x for v in level if isinstance(v, (dict, list)) for x in (v.values() if isinstance(v, dict) else v)]
        if not level:
            return depth
        depth += 1


def _fail(code: str, detail: str) -> Parsed:
    return Parsed(error=f"{code}: {detail}")


def parse_response(text: str, expect_calls: bool = True) -> Parsed:
    """The response parsed strictly in ToolRL's layout (module docstring); `expect_calls` False: the no-call layout."""
    body = (text or "").strip()
    if not body:
        return _fail("empty", "the response is empty")
    for tag in TAGS:
        if body.count(tag) > 1:
            return _fail("repeated_tag", f"{tag} appears {body.count(tag)} times")
    if not body.startswith("<think>"):
        if "<think>" in body:
            return _fail("text_before_think", "the response must start with <think>")
        return _fail("no_think", "no <think>...</think> block")
    if "</think>" not in body:
        return _fail("unclosed_think", "<think> is never closed by </think>")
    think, rest = body[len("<think>"):].split("</think>", 1)
    rest = rest.lstrip()
    block, other = ("tool_call", "response") if expect_calls else ("response", "tool_call")
    if not rest.startswith(f"<{block}>"):
        if rest.startswith(f"<{other}>"):
            return _fail("wrong_block", f"expected <{block}> after </think>, got <{other}>")
        return _fail(f"no_{block}", f"no <{block}> block right after </think>")
    if f"</{block}>" not in rest:
        return _fail(f"unclosed_{block}", f"<{block}> is never closed by </{block}>")
    inner, after = rest[len(block) + 2:].split(f"</{block}>", 1)
    if after.strip():
        return _fail("text_after_block", f"text after </{block}>: {after.strip()[:60]!r}")
    if not expect_calls:
        return Parsed(think=think, response=inner.strip())
    lines = [line.strip() for line in inner.split("\n") if line.strip()]
    if not lines:
        return _fail("empty_tool_call", "the <tool_call> block holds no call")
    calls = []
    for number, line in enumerate(lines, 1):
        try:
            call = json.loads(line)
        except json.JSONDecodeError as exc:
            return _fail("bad_json", f"call line {number}: {exc.msg} at column {exc.colno}")
        except (ValueError, RecursionError) as exc:  # an int past Python's 4,300 digits; nesting past the decoder's
            return _fail("bad_json", f"call line {number}: {type(exc).__name__}: {str(exc)[:80]}")
        if _depth(call) > MAX_DEPTH:  # what parsed stays safe for every later reader (the checker recurses)
            return _fail("too_deep", f"call line {number} nests deeper than {MAX_DEPTH} levels")
        if not isinstance(call, dict) or sorted(call) != sorted(CALL_KEYS):
            got = ", ".join(sorted(call)) if isinstance(call, dict) else type(call).__name__
            return _fail("not_a_call", f"call line {number} needs exactly the keys name and parameters, got {got}")
        if not isinstance(call["name"], str) or not call["name"] or not isinstance(call["parameters"], dict):
            return _fail("not_a_call", f"call line {number}: name must be a string and parameters an object")
        calls.append(call)
    return Parsed(think=think, calls=calls)


@dataclass(frozen=True)
class Verdict:
    """One response judged against its row."""
    format_ok: bool          # parsed in the layout the row expects
    correct: bool            # BFCL's checker accepted the calls (a no-call row: parsed without a call)
    calls: list = None       # the parsed calls as BFCL's checker takes them, [{name: {argument: value}}]
    parse_error: str = None  # why the strict parse failed ("code: detail"), None when it parsed
    error_type: str = None   # BFCL's error_type when the calls parsed but were judged wrong
    error: str = None        # BFCL's first error message then


def expects_calls(row: dict) -> bool:
    """Whether the row's right answer is some call (BFCL's answer rows), not none (irrelevance)."""
    return bool(row.get("ground_truth"))


class ToolCallVerifier:
    """Judges a response to a tool-call row {"function", "ground_truth", "category"?, "language"?}; stateless and
    thread-safe, shared by the env (its score), the rewards and eval.py. Called as a verifier, its score: 1 or 0."""

    def judge(self, text: str, row: dict) -> Verdict:
        wants_calls = expects_calls(row)
        parsed = parse_response(text, expect_calls=wants_calls)
        if parsed.error:
            return Verdict(format_ok=False, correct=False, parse_error=parsed.error)
        if not wants_calls:
            return Verdict(format_ok=True, correct=True, calls=[])
        calls = [{c["name"]: c["parameters"]} for c in parsed.calls]
        result = check_calls(row["function"], calls, row["ground_truth"], checker_route(row), row.get("language"))
        if result["valid"]:
            return Verdict(format_ok=True, correct=True, calls=calls)
        first = str(result["error"][0])[:300] if result.get("error") else None
        return Verdict(format_ok=True, correct=False, calls=calls, error_type=result.get("error_type"), error=first)

    def __call__(self, prompt, completion, sample) -> float:
        return 1.0 if self.judge(completion, sample).correct else 0.0


class ToolFormatReward:
    """tool_format: 1 when the response parses in the layout its row expects (DARA C.2, ToolRL's R_format); the
    JSON of the call lines is part of credo's parse, not of ToolRL's format reward (module docstring)."""
    name = "tool_format"

    def __init__(self):
        self.verifier = ToolCallVerifier()

    def __call__(self, prompt, completion, sample) -> float:
        return 1.0 if self.verifier.judge(completion, sample).format_ok else 0.0


class ToolCorrectReward:
    """tool_correct: BFCL's AST checker, 1 or 0 (mode "ast"), or ToolRL's partial credit in [-3, 3] ("toolrl")."""
    name = "tool_correct"
    MODES = ("ast", "toolrl")

    def __init__(self, mode: str = "ast"):
        if mode not in self.MODES:
            raise ValueError(f"tool_correct mode must be one of {self.MODES}, got {mode!r}")
        self.mode, self.verifier = mode, ToolCallVerifier()

    def __call__(self, prompt, completion, sample) -> float:
        verdict = self.verifier.judge(completion, sample)
        if self.mode == "ast":
            return 1.0 if verdict.correct else 0.0
        low, high = TOOLRL_RANGE
        if not expects_calls(sample):
            return 0.0  # ToolRL scores a row without a tool call 0 whatever the response
        if verdict.correct:
            return high
        if not verdict.format_ok:
            return low
        return toolrl_partial_credit(verdict.calls, sample["ground_truth"], low, high)


def think_words(completion: str):
    """Whitespace-separated words of the last <think> block as DARA's rlla.py reads it (module docstring): the text
    after the last `<think>` up to the next `</think>`; None when either tag is missing from the response."""
    text = completion or ""
    if "<think>" not in text or "</think>" not in text:
        return None
    return len(text.split("<think>")[-1].split("</think>")[0].split())


class ThinkLengthReward:
    """think_length: 1 when the last <think> block has at most `limit` words, 0 when longer or missing (DARA C.3)."""
    name = "think_length"

    def __init__(self, limit: int = DEFAULT_THINK_LIMIT):
        self.limit = limit

    def __call__(self, prompt, completion, sample) -> float:
        words = think_words(completion)
        return 1.0 if words is not None and words <= self.limit else 0.0


class LengthBudgetReward:
    """length_budget: 1 when the response has at most `budget` generated tokens, else 0 (DARA 4.2). TRL's batched
    convention, so that it counts the sampled ids (completion_ids) rather than re-encoding the text."""
    name = "length_budget"

    def __init__(self, budget: int):
        self.budget = budget

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list:
        if completion_ids is None:
            raise ValueError("length_budget counts the sampled tokens: it needs completion_ids")
        return [1.0 if len(ids) <= self.budget else 0.0 for ids in completion_ids]


def exceed_and_joint(lengths: list, correct: list, budget: int) -> dict:
    """DARA's budget metrics (section 4.2, D.4) over responses: Exceed, the share over `budget` tokens, and Joint, the
    share both correct and within it."""
    n = len(lengths)
    if n == 0:
        return {}
    return {"Exceed": sum(length > budget for length in lengths) / n,
            "Joint": sum(bool(ok) and length <= budget for length, ok in zip(lengths, correct)) / n}


# --- building them by name (rewards/registry.py) and their flags ---

def _think_length(settings):
    if settings.think_length_limit < 0:
        raise KeyError(f"--think_length_limit must be >= 0, got {settings.think_length_limit}")
    return ThinkLengthReward(settings.think_length_limit)


def _length_budget(settings):
    budget = settings.length_budget_tokens
    if budget is None:
        raise KeyError("--reward_funcs length_budget needs --length_budget_tokens N (the budget in tokens, DARA 4.2)")
    if budget < 1:
        raise KeyError(f"--length_budget_tokens must be >= 1, got {budget}")
    return LengthBudgetReward(budget)


# name -> builder(rewards.registry.BuiltInRewardSettings)
TOOLCALL_REWARDS = {
    "tool_format": lambda settings: ToolFormatReward(),
    "tool_correct": lambda settings: ToolCorrectReward(settings.tool_correct_mode),
    "think_length": _think_length,
    "length_budget": _length_budget,
}


def add_length_budget_flag(group):
    """--length_budget_tokens: the length_budget reward's budget, and eval.py's Exceed / Joint."""
    group.add_argument("--length_budget_tokens", type=int, default=None,
                       help="length_budget reward: 1 when a response has at most this many generated tokens, else 0 "
                            "(DARA 4.2's binary budget; required with --reward_funcs length_budget). eval.py: also "
                            "report Exceed (share of responses over it) and Joint (correct and within it)")


def add_toolcall_reward_flags(parser):
    g = parser.add_argument_group("DARA's rewards (--reward_funcs tool_format, tool_correct, think_length, "
                                  "length_budget; docs/toolcall.md)")
    g.add_argument("--tool_correct_mode", choices=ToolCorrectReward.MODES, default="ast",
                   help="tool_correct: ast = 1 when BFCL's AST checker accepts the calls, else 0 (credo's default); "
                        "toolrl = ToolRL's partial credit in [-3, 3] (tool names, argument names and values; credo's "
                        "reading for BFCL's accepted-value answers), the correctness reward DARA's code trains with")
    g.add_argument("--think_length_limit", type=int, default=DEFAULT_THINK_LIMIT,
                   help="think_length: 1 when the last <think> block has at most this many whitespace-separated "
                        "words (DARA C.3: 16)")
    add_length_budget_flag(g)
