"""AppWorld's evaluation metrics (TGC, SGC, per difficulty, average pass rate) over eval.py's episode records.

Here, beside the env, because they read the records AppWorldEnv.episode_record writes; eval.py reaches them through
`Env.eval_metrics`.
"""


def pass_rate(result: dict) -> float:
    """The share of a task's checks that pass (AppWorld's pass_count / num_tests); success itself for a task with
    no checks."""
    return result["pass_count"] / result["num_tests"] if result["num_tests"] else float(bool(result["success"]))


def appworld_metrics(records: list) -> dict:
    """AppWorld's metrics as fractions in [0, 1] (AppWorld reports them x 100).

    records: one per episode, {"task_id": "<scenario>_<n>", "difficulty": 1-3, "success": bool, "pass_count",
    "num_tests", optional "sample": which of a task's n samples}. TGC (task goal completion): the share of episodes
    whose every check passed. SGC (scenario goal completion): the share of scenarios all of whose tasks succeeded,
    one scenario outcome per sample index (with n = 1, AppWorld's definition). A scenario's difficulty is its
    hardest task's. avg_pass_rate: the mean share of checks passed.
    """
    if not records:
        return {}
    scenarios = {}  # (scenario, sample) -> [difficulty, all succeeded]
    for r in records:
        key = (r["task_id"].rpartition("_")[0] or r["task_id"], r.get("sample", 0))
        d, ok = scenarios.get(key, (0, True))
        scenarios[key] = (max(d, r.get("difficulty") or 0), ok and bool(r["success"]))
    m = {"appworld/tgc": sum(bool(r["success"]) for r in records) / len(records),
         "appworld/sgc": sum(ok for _, ok in scenarios.values()) / len(scenarios),
         "appworld/avg_pass_rate": sum(pass_rate(r) for r in records) / len(records)}
    for level in sorted({r.get("difficulty") for r in records if r.get("difficulty")}):
        tasks = [r for r in records if r.get("difficulty") == level]
        m[f"appworld/tgc/difficulty_{level}"] = sum(bool(r["success"]) for r in tasks) / len(tasks)
        scen = [ok for d, ok in scenarios.values() if d == level]
        if scen:
            m[f"appworld/sgc/difficulty_{level}"] = sum(scen) / len(scen)
    return m
