"""Tool-call rows for --env toolcall: BFCL v4's single-turn categories from the installed bfcl-eval package, or a
user's own JSONL in the same schema, split into train and held-out by a fixed hash of the question id.

A row (BFCL's question row and its possible-answer row, matched by "id", merged into one):
    {"id": "simple_python_0",
     "question": [[{"role": "user", "content": "Find the area of a triangle with base 10 and height 5."}]],
     "function": [{"name": "calculate_triangle_area", "description": "...",
                   "parameters": {"type": "dict", "properties": {"base": {"type": "integer", "description": "..."},
                                                                 "height": {"type": "integer", "description": "..."}},
                                  "required": ["base", "height"]}}],
     "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}],
     "category": "simple_python"}
- "question": BFCL's list of turns (the first is used; its system messages join the env's), a flat list of
  messages, or a plain string (one user message).
- "function": the tools, in BFCL's (Gorilla) schema: "dict", "float", "tuple", ... are shown to the model as their
  JSON-schema types (envs/toolcall.py).
- "ground_truth": the expected calls, each {function name: {argument: [accepted values]}}, "" among the values
  meaning the argument may be left out; [] when the right answer is no call (BFCL's irrelevance categories).
- "category" (optional): the name results are reported under; one of BFCL's names also picks the checker's route,
  otherwise the route follows the answer's shape (rewards/bfcl.checker_route). "language" (optional): python, java or
  javascript (Java and JavaScript argument values are strings of source code, as BFCL's checker wants).

The split (credo's reading): a question is held out when crc32(id) % 10 < 2, about 20% of every category, the same
on every machine and run, whatever the seed, the categories chosen or the order of the files. BFCL's files are JSON
Lines despite their .json names and are read with plain json (bfcl_eval.utils would create folders).
"""
import functools
import json
import os
import random
import zlib

from rewards.bfcl import AST_CATEGORIES, IRRELEVANCE_CATEGORIES, bfcl_data_dir

HELD_OUT_BUCKETS = 2  # of 10: crc32(id) % 10 < 2 is held out
SPLITS = ("train", "eval")
ROLES = ("system", "user", "assistant")
LANGUAGES = ("python", "java", "javascript")


class ToolCallDataError(ValueError):
    """A tool-call row that cannot be used; the message names its file and line (or its id)."""


def is_held_out(question_id) -> bool:
    """Whether a question belongs to the held-out split: a fixed hash of its id, never the seed."""
    return zlib.crc32(str(question_id).encode("utf-8")) % 10 < HELD_OUT_BUCKETS


def category_names(categories: str, irrelevance: bool = False) -> tuple:
    """"all" (BFCL's ten single-turn categories with answers) or a comma list, plus irrelevance and live_irrelevance
    when `irrelevance`; ValueError naming an unknown one."""
    names = list(AST_CATEGORIES) if categories in (None, "", "all") else \
        [c.strip() for c in categories.split(",") if c.strip()]
    unknown = [c for c in names if c not in AST_CATEGORIES + IRRELEVANCE_CATEGORIES]
    if unknown:
        raise ValueError(f"unknown BFCL categories {', '.join(unknown)}; choose from all, "
                         f"{', '.join(AST_CATEGORIES + IRRELEVANCE_CATEGORIES)}")
    if irrelevance:
        names += [c for c in IRRELEVANCE_CATEGORIES if c not in names]
    return tuple(names)


def read_jsonl(path: str):
    """(location "path:line", row) of each non-empty line; ToolCallDataError naming the line that is not JSON."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise ToolCallDataError(f"{path}:{number}: not valid JSON ({exc.msg})") from None


def _messages_ok(messages) -> bool:
    return isinstance(messages, list) and bool(messages) and all(
        isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in messages)


def question_messages(question) -> list:
    """The chat messages of a row's question: a string, a flat list of messages, or BFCL's turns (the first)."""
    if isinstance(question, str):
        return [{"role": "user", "content": question}]
    if isinstance(question, list) and question and all(isinstance(t, list) for t in question):
        return list(question[0])
    return list(question)


def check_row(row, location: str) -> dict:
    """`row` when it is a usable tool-call row (module docstring), else ToolCallDataError naming `location`."""
    def bad(why):
        raise ToolCallDataError(f"{location}: {why}")

    if not isinstance(row, dict):
        bad(f"expected a JSON object, got {type(row).__name__}")
    missing = [k for k in ("id", "question", "function", "ground_truth") if k not in row]
    if missing:
        bad(f"missing {', '.join(missing)} (the row has: {', '.join(row) or 'nothing'})")
    question = row["question"]
    if isinstance(question, str):
        question_ok = bool(question.strip())
    else:
        question_ok = isinstance(question, list) and bool(question) and _messages_ok(question_messages(question))
    if not question_ok:
        bad("question must be a non-empty string, a list of {role, content} messages, or BFCL's list of turns")
    functions = row["function"]
    if not isinstance(functions, list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("parameters"), dict)
            and isinstance(f["parameters"].get("properties", {}), dict) for f in functions):
        bad("function must be a list of {name, description, parameters: {type, properties, required}} tools")
    names = {f["name"] for f in functions}
    answer = row["ground_truth"]
    if not isinstance(answer, list):
        bad("ground_truth must be a list of expected calls ([] when the right answer is no call)")
    for call in answer:
        if not (isinstance(call, dict) and len(call) == 1):
            bad(f"each ground_truth call must be {{function name: {{argument: [accepted values]}}}}, got {call!r:.80}")
        (name, arguments), = call.items()
        if name not in names:
            bad(f"ground_truth calls {name!r}, which is not among the row's functions ({', '.join(sorted(names))})")
        if not isinstance(arguments, dict) or not all(isinstance(v, list) for v in arguments.values()):
            bad(f"ground_truth {name!r}: each argument maps to a list of accepted values")
    if row.get("language") is not None and row["language"] not in LANGUAGES:
        bad(f"language must be one of {', '.join(LANGUAGES)}, got {row['language']!r}")
    return row


@functools.lru_cache(maxsize=None)
def bfcl_category(category: str) -> tuple:
    """The merged rows of one BFCL category from the installed package (answers joined by id; [] for irrelevance)."""
    data = bfcl_data_dir()
    questions = [row for _, row in read_jsonl(os.path.join(data, f"BFCL_v4_{category}.json"))]
    answers = {}
    if category not in IRRELEVANCE_CATEGORIES:
        answers = {row["id"]: row["ground_truth"]
                   for _, row in read_jsonl(os.path.join(data, "possible_answer", f"BFCL_v4_{category}.json"))}
    return tuple({"id": q["id"], "category": category, "question": q["question"], "function": q["function"],
                  "ground_truth": answers.get(q["id"], [])} for q in questions)


def user_rows(paths: str) -> list:
    """A user's tool-call JSONL (a comma list of files), every row checked; errors name the file and line."""
    rows, seen = [], {}
    for path in [p.strip() for p in paths.split(",") if p.strip()]:
        if not os.path.exists(path):
            raise ToolCallDataError(f"{path} does not exist")
        for location, row in read_jsonl(path):
            check_row(row, location)
            if str(row["id"]) in seen:
                raise ToolCallDataError(f"{location}: id {row['id']!r} repeats {seen[str(row['id'])]} (the split "
                                        f"hashes ids, so each must be unique)")
            seen[str(row["id"])] = location
            rows.append(row)
    if not rows:
        raise ToolCallDataError(f"{paths}: no rows")
    return rows


def interleave_categories(rows: list) -> list:
    """Rows ordered round-robin over their categories (file order within each), so that the first N of an eval set
    cover every category rather than the first file."""
    by_category = {}
    for row in rows:
        by_category.setdefault(row.get("category") or "", []).append(row)
    queues = list(by_category.values())
    out = []
    for k in range(max((len(q) for q in queues), default=0)):
        out += [q[k] for q in queues if k < len(q)]
    return out


def schema_chars(row: dict) -> int:
    """Characters of a row's tools as JSON (BFCL's schema): what --toolcall_max_schema_chars caps."""
    return len(json.dumps(row["function"]))


def prompt_size(row: dict) -> int:
    """Characters of a row's tools and question, a tokenizer-free proxy for its prompt's length: eval batches of rows
    in this order pad little (the longest tool lists are about 20 times the shortest)."""
    return schema_chars(row) + len(json.dumps(row["question"]))


def toolcall_rows(split: str, n: int, seed: int, categories: str = "all", irrelevance: bool = False,
                  data: str = None, max_schema_chars: int = 0) -> list:
    """Up to `n` rows of `split`: "train" (not held out, in a seeded order) or "eval" (held out: the first n of the
    rows interleaved by category, so that any n covers every category, sorted by prompt_size). `data`: a user's JSONL
    instead of BFCL's files, split the same way. `max_schema_chars` > 0 keeps only the rows whose tools take at most
    that many characters (schema_chars), in both splits: a cap on prompt length, hence on a CPU step's cost; which
    rows are held out does not change (the split hashes ids)."""
    if split not in SPLITS:
        raise ValueError(f"tool-call splits are {SPLITS}, got {split!r}")
    if data:
        rows = user_rows(data)
    else:
        rows = [row for category in category_names(categories, irrelevance) for row in bfcl_category(category)]
    if max_schema_chars:
        rows = [r for r in rows if schema_chars(r) <= max_schema_chars]
    if split == "eval":  # which rows: the first n over every category; their order: shortest prompt first
        return sorted(interleave_categories([r for r in rows if is_held_out(r["id"])])[:n], key=prompt_size)
    train = [r for r in rows if not is_held_out(r["id"])]
    random.Random(seed).shuffle(train)
    return train[:n]
