"""The layers: rewards/ and envs/ are the lower ones (verifiers, environments); rl/ uses them, never the reverse.

An upward import makes a verifier drag in the trainer (rl.rollout pulls in DeepSpeed) and ties the layers into a
cycle; these tests make a new one fail CI instead of waiting for a review to notice it.
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


def upward_imports(package: str) -> list:
    return [f"{os.path.relpath(path, REPO_ROOT)}:{line}: {module}" for path in python_files(package)
            for line, module in imported_modules(path) if module == "rl" or module.startswith("rl.")]


@pytest.mark.parametrize("package", LOWER_LAYERS)
def test_lower_layers_never_import_rl(package):
    assert python_files(package), f"no Python files found under {package}/"
    assert upward_imports(package) == []


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


@pytest.mark.parametrize("folder", ["benchmarks", "benchmarks/mechanisms", "scripts", "scripts/gpu"])
def test_no_script_folder_hides_a_package(folder):
    # `python benchmarks/x.py` puts benchmarks/ first on sys.path: a benchmarks/rewards.py there would be imported
    # instead of the rewards package (it was, until it became benchmarks/extra_rewards.py)
    packages = {"rl", "rewards", "envs", "benchmarks", "tests"}
    names = {name[:-3] for name in os.listdir(os.path.join(REPO_ROOT, folder)) if name.endswith(".py")}
    names |= {name for name in os.listdir(os.path.join(REPO_ROOT, folder))
              if os.path.isdir(os.path.join(REPO_ROOT, folder, name))}
    assert names & packages == set()
