"""Typed settings below the trainer: the parsed Namespace stops at the trainer and the parser.

A module below the trainer gets a frozen settings dataclass (SamplingSettings, LossSettings, a method's Config, ...),
built from the flags by that class's own `from_args`; it never reads `args.<flag>` at run time. So a reader of a room
sees every knob it uses in one dataclass, and a test can build the room without a parser.

What may read the Namespace (the boundary):
- the trainers and the parsers: rl/trainer.py, rl/config.py, rl/sft/trainer.py, rl/sft/config.py (and the entry
  points at the top level, which are not counted here);
- parse-time functions, run by the parser before any run exists: `add_*` (declare flags), `validate*`, `check_*`,
  `resolve_*` (refuse or fill a flag in place);
- the builders of typed settings: `from_args` (and `config_from_args`), and a method's class-level flag queries
  `reward_names` (the rewards the flags ask for) and `needs_reference`;
- the run's record of every flag: rl/run/saved_config.py's `plain_flags` (config.json);
- `main` of a module that is its own command (`python -m rl.sft.warm_start_data`).
Anything else that reads `args.x`, `getattr(args, ...)` or `vars(args)`, where `args` is a parameter of the function,
is a raw read and is counted.
"""
import ast
import os
import re

from tests.config.test_layering import python_files
from tests.helpers import REPO_ROOT

TRAINERS_AND_PARSERS = {"rl/trainer.py", "rl/config.py", "rl/sft/trainer.py", "rl/sft/config.py"}
BOUNDARY = re.compile(r"^(add_\w+|validate\w*|check_\w+|resolve_\w+|\w*from_args|reward_names|needs_reference|"
                      r"plain_flags|main)$")


def raw_namespace_reads(path: str) -> list:
    """(line, what) for each read of a parameter named `args` outside the boundary functions."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    found = []

    def visit(node, function, has_args):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            has_args = has_args or any(p.arg == "args" for p in params)  # a closure reads its parent's too
            function = getattr(node, "name", function)
        allowed = function is not None and BOUNDARY.match(function)
        if has_args and not allowed:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
                found.append((node.lineno, f"args.{node.attr}"))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars")
                  and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "args"):
                found.append((node.lineno, f"{node.func.id}(args)"))
        for child in ast.iter_child_nodes(node):
            visit(child, function, has_args)

    visit(tree, None, False)
    # the trainer's own Namespace kept on self (self.args.x) is the same read
    found += [(node.lineno, f"self.args.{node.attr}") for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "args"
              and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"]
    return sorted(found)


def reads_below_the_trainer() -> dict:
    out = {}
    for package in ("rl", "rewards"):
        for path in python_files(package):
            rel = os.path.relpath(path, REPO_ROOT)
            if rel not in TRAINERS_AND_PARSERS and (reads := raw_namespace_reads(path)):
                out[rel] = reads
    return out


def test_no_raw_namespace_read_below_the_trainer():
    found = {path: [f"{line}: {what}" for line, what in reads] for path, reads in reads_below_the_trainer().items()}
    assert not found, ("these modules below the trainer read the parsed flags at run time; give them a settings "
                       f"dataclass built by its from_args (tests/config/test_typed_settings.py): {found}")


def test_the_count_sees_a_raw_read_and_spares_the_boundary(tmp_path):
    source = tmp_path / "room.py"
    source.write_text("def run(args, x):\n    return args.temperature + getattr(args, 'top_p')\n\n"
                      "def from_args(args):\n    return args.temperature\n\n"
                      "def other(items):\n    return [args.x for args in items]\n\n"
                      "class Step:\n    def go(self):\n        return self.args.beta\n")
    assert raw_namespace_reads(str(source)) == [(2, "args.temperature"), (2, "getattr(args)"), (12, "self.args.beta")]


def method_flag_names() -> set:
    """Every flag a method declares itself (its add_flags group), as the Namespace names it."""
    import argparse

    from rl.methods import METHODS
    names = set()
    for cls in METHODS.values():
        parser = argparse.ArgumentParser()
        cls.add_flags(parser)
        names |= {action.dest for action in parser._actions if action.dest != "help"}
    return names


def test_no_module_outside_the_methods_names_a_method_s_flag():
    """The engine, the reference sync and the scorer ask the method (Method.needs_reference, reward_names), so a
    method's flags can change without a change outside rl/methods/."""
    flags = method_flag_names()
    assert "maestro_kl_in_reward" in flags and "tcpo_cf_samples" in flags  # the check sees the methods' own groups
    found = []
    for package in ("rl", "rewards"):
        for path in python_files(package):
            rel = os.path.relpath(path, REPO_ROOT)
            if rel.startswith("rl/methods/"):
                continue
            with open(path) as f:
                tree = ast.parse(f.read(), filename=path)
            for node in ast.walk(tree):
                named = (node.attr if isinstance(node, ast.Attribute) else
                         node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
                if named in flags:
                    found.append(f"{rel}:{node.lineno}: {named}")
    assert not found, f"a method's flag read outside rl/methods/ (add a Method hook instead): {found}"
