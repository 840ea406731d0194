"""The floor plan: the order of the rooms, and no import that goes up a floor or closes a cycle.

rewards/ and envs/ are the lower layers (verifiers, environments); rl/ uses them, never the reverse. Inside rl/,
the rooms are stacked in FLOOR_ORDER (the top of a step first): a module may import its own room and the rooms
below it. Imports inside functions count, so a late import cannot hide an upward arrow or a cycle. An upward
import makes a low room drag in a high one (a verifier pulling in DeepSpeed) and ties the rooms into a knot;
these tests make a new one fail CI instead of waiting for a review to notice it.
"""
import ast
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

LOWER_LAYERS = ("rewards", "envs")


def python_files(package: str) -> list:
    root = os.path.join(REPO_ROOT, package)
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names
                  if name.endswith(".py"))


def imported_modules(path: str) -> list:
    """(line, module) of every absolute import in the file, the ones inside functions included."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def upward_imports(package: str, above: str = "rl") -> list:
    return [f"{os.path.relpath(path, REPO_ROOT)}:{line}: {module}" for path in python_files(package)
            for line, module in imported_modules(path) if module == above or module.startswith(above + ".")]


@pytest.mark.parametrize("package", LOWER_LAYERS)
def test_lower_layers_never_import_rl(package):
    assert python_files(package), f"no Python files found under {package}/"
    assert upward_imports(package) == []


def test_benchmarks_never_import_experiments():
    # one arrow between the two script folders: experiments/ (sweeps, analyses, testbeds) builds on benchmarks/'
    # shared tools (results_io, ports, run_child, paired statistics, archive packs), never the reverse (issue #63)
    assert python_files("benchmarks") and python_files("experiments")
    assert upward_imports("benchmarks", above="experiments") == []


def test_the_check_sees_an_upward_import_even_inside_a_function(tmp_path):
    path = tmp_path / "sneaky.py"
    path.write_text("import os\n\ndef late():\n    from rl.eval.evaluation import aggregate\n    import rl\n")
    assert imported_modules(str(path)) == [(1, "os"), (4, "rl.eval.evaluation"), (5, "rl")]


def test_rewards_and_envs_import_without_the_trainer_or_deepspeed():
    # every module of both layers, in a fresh interpreter: nothing of rl/ and no DeepSpeed may come along
    modules = [os.path.relpath(p, REPO_ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
               for package in LOWER_LAYERS for p in python_files(package)]
    # the sandbox's helper scripts run stdlib-only inside bubblewrap, by path, never as modules of the package
    modules = [m for m in modules if m not in ("rewards.sandbox.harness", "rewards.sandbox.serve")]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            "bad = sorted(m for m in sys.modules if m == 'rl' or m.startswith('rl.') or m == 'deepspeed')\n"
            "print(','.join(bad))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", f"importing rewards/ and envs/ loaded {proc.stdout.strip()}"


@pytest.mark.parametrize("folder", ["benchmarks", "experiments", "experiments/mechanisms", "scripts", "scripts/gpu"])
def test_no_script_folder_hides_a_package(folder):
    # `python benchmarks/x.py` puts benchmarks/ first on sys.path: a benchmarks/rewards.py there would be imported
    # instead of the rewards package (it was, until it became benchmarks/extra_rewards.py)
    packages = {"rl", "rewards", "envs", "benchmarks", "experiments", "tests"}
    names = {name[:-3] for name in os.listdir(os.path.join(REPO_ROOT, folder)) if name.endswith(".py")}
    names |= {name for name in os.listdir(os.path.join(REPO_ROOT, folder))
              if os.path.isdir(os.path.join(REPO_ROOT, folder, name))}
    assert names & packages == set()


# rl/'s rooms, top floor first: the loop, the flags that compose every room's, then the rooms in the order a step
# leans on them. A room may import itself and anything listed after it (rewards/ and envs/ sit below all of rl/).
FLOOR_ORDER = (
    "rl.trainer",      # the loop: rollout -> score -> advantages -> update -> log
    "rl.sft",          # supervised fine-tuning (sft.py): its loop, data and flags, on the same engine and run folder
    "rl.config",       # composes each room's flags
    "rl.eval",         # evaluation (plays episodes), validation during training, the judge
    "rl.run",          # run start, saved config, checkpoints, manifest, best checkpoint, launcher ranks
    "rl.scoring",      # every reward of a rollout
    "rl.methods",      # one module per --algo (and MAESTRO's Conductor, TCPO's counterfactuals)
    "rl.log",          # metrics, loggers, completions
    "rl.update",       # log-probs, batching, losses, rollout correction, the PPO step
    "rl.rollout",      # data, episodes, samplers, decode loop, vLLM
    "rl.advantages",   # the pure maths
    "rl.types",        # Rollout, GlobalBatch
    "rl.engine",       # DeepSpeed actor, ZeRO config, LoRA, hardware, dist, models
    "rl.errors",
    "rl",              # rl/__init__.py: REPO_ROOT
)


def module_name(path: str) -> str:
    return os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")


def room_of(module: str) -> str:
    """The FLOOR_ORDER entry a module of rl/ belongs to (its longest matching prefix)."""
    matches = [room for room in FLOOR_ORDER if module == room or module.startswith(room + ".")]
    return max(matches, key=len)


def imported_own_modules(path: str, own: set) -> list:
    """(line, module) of every import of one of `own`'s modules; `from rl.engine import dist` is rl.engine.dist."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name in own]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in own:
            submodules = [f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in own]
            found += [(node.lineno, m) for m in submodules] or [(node.lineno, node.module)]
    return found


def rl_import_edges(packages=("rl", "rewards", "envs")) -> list:
    """(file:line, importer module, imported module) for every import between credo's own modules."""
    own = {module_name(p) for package in packages for p in python_files(package)}
    return [(f"{os.path.relpath(path, REPO_ROOT)}:{line}", module_name(path), module)
            for package in packages for path in python_files(package)
            for line, module in imported_own_modules(path, own)]


def upward_arrows() -> list:
    arrows = []
    for where, importer, imported in rl_import_edges(("rl",)):
        if not imported.startswith("rl"):
            continue
        a, b = FLOOR_ORDER.index(room_of(importer)), FLOOR_ORDER.index(room_of(imported))
        if b < a:
            arrows.append(f"{where}: {room_of(importer)} imports {imported} ({room_of(imported)} is above it)")
    return arrows


def import_cycles(edges) -> list:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = {}
    for _, importer, imported in edges:
        if importer != imported:
            graph.setdefault(importer, set()).add(imported)
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_every_module_of_rl_has_a_floor():
    rooms = {room_of(module_name(p)) for p in python_files("rl")}
    assert rooms <= set(FLOOR_ORDER)
    top_level = sorted(name for name in os.listdir(os.path.join(REPO_ROOT, "rl"))
                       if name != "__pycache__" and not name.startswith("."))
    assert len(top_level) <= 15, f"rl/ has {len(top_level)} entries: put the new module in the room that owns it"


def test_no_room_of_rl_imports_a_room_above_it():
    assert upward_arrows() == []


def test_no_import_cycle_in_rl_rewards_or_envs():
    assert import_cycles(rl_import_edges()) == []


def test_the_floor_check_sees_an_upward_arrow_and_a_cycle():
    assert room_of("rl.rollout.vllm.backend") == "rl.rollout" and room_of("rl.trainer") == "rl.trainer"
    assert FLOOR_ORDER.index("rl.update") < FLOOR_ORDER.index("rl.rollout")  # update may read rollout, not back
    edges = [("a.py:1", "rl.a", "rl.b"), ("b.py:3", "rl.b", "rl.c"), ("c.py:2", "rl.c", "rl.a"), ("d.py:1", "rl.d", "rl.a")]
    assert import_cycles(edges) == [["rl.a", "rl.b", "rl.c"]]
