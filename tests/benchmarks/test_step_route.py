"""README's list of the files one default GRPO step runs is the traced route (issue #63 item 1): a file the step
enters that README does not name, or a file README names that the step no longer enters, fails here. The optional
pieces (validation, best checkpoint, reference sync, DAPO's length shaping, pooled and policy rewards, a method's
optional hooks) are built only when their flag is on, so they are not on the list."""
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_route() -> list:
    """The backticked .py paths of README's "A default GRPO step ..." paragraph, this test's own path aside."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    start = text.index("A default GRPO step (arith")
    paragraph = text[start:text.index("\n\n", start)]
    return [path for path in re.findall(r"`([\w/]+\.py)`", paragraph) if not path.startswith("tests/")]


def test_readme_names_every_file_a_default_grpo_step_runs_and_no_other(tiny_model_dir):
    proc = subprocess.run([sys.executable, "benchmarks/step_route.py", "--model_name_or_path", tiny_model_dir,
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    traced = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    listed = readme_route()
    assert len(listed) == len(set(listed)), f"README names a file twice: {listed}"
    assert set(listed) == traced, (f"README names, the step does not run: {sorted(set(listed) - traced)}; the step "
                                   f"runs, README does not name: {sorted(traced - set(listed))}")
    for optional in ("rl/eval/validation.py", "rl/run/best_checkpoint.py", "rl/update/ref_sync.py",
                     "rl/update/length_shaping.py", "rewards/pooled.py", "rewards/policy_rewards.py",
                     "rl/methods/base.py"):
        assert optional not in traced, f"a default step entered {optional}, which only an optional flag needs"
