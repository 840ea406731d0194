"""Paired multi-seed comparison of methods: M methods x S seeds of train.py (then eval.py), cached and resumable.

    python experiments/compare.py --name dara_vs_gdpo --seeds 1,2,3,4,5 \
        --method gdpo="--algo gdpo" --method dara-asym="--algo dara --dara_variant asym" \
        --train_args "--reward_funcs correctness,benchmarks.extra_rewards:concise_answer --max_steps 40" \
        --metric first_step:reward/answer_line/mean:0.8:3 --eval_args "--limit 200"
    python experiments/compare.py --name mine --runs grpo=output/grpo_s1,output/grpo_s2 \
        --runs rloo=output/rloo_s1,output/rloo_s2 --metric mean_last:reward/mean:5    # runs already made

- An arm is `--method LABEL=FLAGS` (runs made here) or `--runs LABEL=DIR[,DIR...]` (train.py output folders already
  made, one per seed, read and never run: experiments/compare_runs.py). The report goes to CACHE_DIR/NAME.md (.json,
  .png); the committed sweeps (experiments/sweeps/) pass `--results experiments/results/NAME`.

- The first --method is the baseline; every other method is compared with it seed by seed (the same seeds run
  under every method, seed-major order, so an interrupted sweep leaves complete pairs first). With three or more
  methods the others are also paired with each other (`between_methods`), reported apart as not pre-registered.
- The deciding metric is named before anything runs and pre-registered in CACHE_DIR/NAME.sweep.json; a later
  invocation of the same sweep that names another metric is refused (use another --name).
- Each run is cached under the SHA-256 of its full config: train.py's resolved flags (parsed by rl.config, so
  equivalent spellings share a cache entry and a bad flag is refused before any run), the eval.py flags and the
  rank count. A run is complete once CACHE_DIR/<hash>/run.json exists (written atomically after train and eval
  succeed). An interrupted run continues from its latest complete checkpoint (train.py --resume auto, which restores
  the weights, optimiser, data position and RNG: tests/run/test_fault_tolerance.py checks that a resumed run matches an
  uninterrupted one), or only re-evaluates when its training had finished; run.json records `resumed_from`.
  `--restart_interrupted` starts such a run over instead. A SIGTERM to compare.py stops the running train.py after
  its step and checkpoint (benchmarks/run_child.py) and exits 143. Long runs should pass --save_steps so that little is lost.
- Writes RESULTS.json (per-seed values, `seeds`, the config, paired differences with a bootstrap CI and a sign
  test), RESULTS.md and RESULTS.png (needs matplotlib, from requirements-bench.txt). `--also SPEC` adds secondary
  metrics (e.g. final correctness), reported the same way and labelled as not deciding.
- `--plan` validates every run's flags and lists which runs are cached and which would run, running nothing.
- `--archive DIR` copies each finished run's report inputs (no model, no checkpoints) into DIR in the cache's layout
  (experiments/compare_archive.py), packed into DIR.tar.gz, the file git keeps (unpacked into DIR again when DIR is
  missing: benchmarks/archive_pack.py); `--cache_dir DIR` then reproduces the report with nothing to run, and a run the
  archive holds counts as finished, so a sweep continued from a fresh clone (an empty cache) runs only the rest. `--partial`
  runs nothing and reports the seeds finished under every method, labelled partial: a sweep longer than one sitting
  is committed in parts.

Metrics (--metric):
  eval:KEY                          eval.py's results.json metrics[KEY] (e.g. eval:pass@1); higher is better
  last:KEY / mean_last:KEY:N        the last / the mean of the last N metrics.jsonl rows of KEY; higher is better
  first_step:KEY:THRESHOLD:WINDOW   the first step whose trailing WINDOW-step mean of KEY is >= THRESHOLD and stays
                                    so to the end; never: max_steps + 1 (censored); lower is better
  ...:lower                         eval, last and mean_last with lower is better (eval:regression_rate:lower)
"""
import argparse
import contextlib
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import time

# This checkout first: a user's module (--reward_funcs my_pkg.rewards:judge) imports from the root, as in train.py; and
# a second worktree sharing the venv (a frozen copy for a long sweep) must run its own experiments/ and rl/, not the
# checkout the venv's editable install points at.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)

from experiments.compare_archive import (archive_run, archive_sweep_file, command_id, complete_seeds, restore_sweep_file,
                                        runs_by_command)
from experiments.compare_metrics import CompareError, Metric, first_sustained_step, metric_value, parse_metric  # noqa: F401
from experiments.compare_runs import execute_run, folder_record, interrupted_state, parse_runs  # noqa: F401
from benchmarks.paired import PAIRED_HEADER, format_paired_row, paired
from benchmarks import run_child
from benchmarks.archive_pack import unpacked

OWNED_FLAGS = ("--output_dir", "--seed", "--resume", "--local_rank")  # set by compare.py for every run
# differ between identical runs; and values the parser derives from hashed flags (a run cached before one existed
# keeps its key: rl/run/saved_config.py's DERIVED_VALUES)
UNHASHED = ("output_dir", "local_rank", "uses_reference")


def parse_method(spec: str):
    label, sep, flags = spec.partition("=")
    if not sep or not label:
        raise CompareError(f"--method {spec!r}: expected LABEL=FLAGS, e.g. gdpo=\"--algo gdpo\"")
    return label, shlex.split(flags)


def refuse_owned_flags(argv, where: str):
    for arg in argv:
        if arg.split("=", 1)[0] in OWNED_FLAGS:
            raise CompareError(f"{where}: {arg.split('=', 1)[0]} is set by compare.py for each run; leave it out")


def resolved_config(argv, where: str) -> dict:
    """train.py's flags as rl.config parses them (defaults filled in, validated); a bad flag names `where`."""
    from rl.config import parse_args
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # argparse prints its refusal; credo's own checks raise it
            args = parse_args(argv)
    except SystemExit as exc:
        message = exc.code if isinstance(exc.code, str) else said.getvalue().strip()
        raise CompareError(f"{where}: train.py refuses these flags ({' '.join(argv)}):\n{message}") from None
    out = args.output_dir.rstrip(os.sep) + os.sep
    # paths derived from the run's own folder (e.g. the default --tensorboard_path) must not split the cache
    return {k: ("<output_dir>" + os.sep + v[len(out):] if isinstance(v, str) and v.startswith(out) else v)
            for k, v in sorted(vars(args).items()) if k not in UNHASHED}


def run_key(config: dict, eval_argv, num_gpus: int) -> str:
    blob = json.dumps({"train": config, "eval": eval_argv, "num_gpus": num_gpus}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return proc.stdout.strip() + ("+dirty" if dirty else "") if proc.returncode == 0 else "unknown"


def preregister(path: str, metric: Metric, baseline: str):
    """The deciding metric is fixed at a sweep's first invocation; a later one may not switch it."""
    entry = {"deciding_metric": metric.spec, "baseline": baseline}
    if os.path.exists(path):
        with open(path) as f:
            previous = json.load(f)
        if {k: previous.get(k) for k in entry} != entry:
            raise CompareError(f"{path} pre-registered --metric {previous.get('deciding_metric')} with baseline "
                               f"{previous.get('baseline')}; this invocation asks for {metric.spec} / {baseline}. "
                               f"A new deciding metric is a new sweep: use another --name")
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({**entry, "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f, indent=1)


def eval_argv_for(eval_args, config: dict):
    """eval.py inherits the run's env and dtype unless --eval_args names them."""
    argv = list(eval_args)
    named = {a.split("=", 1)[0] for a in argv}
    if "--env" not in named:
        argv += ["--env", str(config["env"])]
    if "--dtype" not in named and config.get("dtype") in ("fp32", "bf16"):
        argv += ["--dtype", config["dtype"]]
    return argv


def between_methods(runs: dict, baseline: str, specs: list) -> dict:
    """Every later non-baseline method against every earlier one (e.g. tcpo vs mt_grpo), per metric spec: reported
    apart and labelled not pre-registered, since a sweep pre-registers each method against the baseline.
    runs: label -> per-seed records (seed order shared), each with "value" (the first spec) and "also" (the rest)."""
    def values(label, spec):
        return [r["value"] if spec == specs[0] else r["also"][spec] for r in runs[label]]
    others = [label for label in runs if label != baseline]
    return {spec: {f"{b} vs {a}": paired(values(b, spec), values(a, spec))
                   for i, a in enumerate(others) for b in others[i + 1:]} for spec in specs} if len(others) > 1 else {}


def arm_seeds(a, methods: dict, folders: dict) -> list:
    """--seeds, or (when every arm is --runs) the seeds all of them have; each --runs arm must have every seed."""
    if a.seeds is None:
        seeds = [1, 2, 3] if methods else sorted(set.intersection(*(set(runs) for runs in folders.values())))
    else:
        seeds = [int(s) for s in a.seeds.split(",")]
    if len(set(seeds)) != len(seeds):
        raise CompareError(f"--seeds {a.seeds}: a seed is repeated")
    for label, runs in folders.items():
        missing = [s for s in seeds if s not in runs]
        if missing or not seeds:
            raise CompareError(f"--runs {label} has no run of seed {', '.join(map(str, missing)) or '(any)'}: its "
                               f"folders are seeds {', '.join(map(str, sorted(runs)))}; pairs need the same seeds "
                               f"in every arm (--seeds picks them)")
    return seeds


def sweep(a) -> dict:
    metric = parse_metric(a.metric)
    secondary = [parse_metric(spec) for spec in a.also]
    arms = getattr(a, "arms", None) or [("method", m) for m in a.method]
    methods = dict(parse_method(spec) for kind, spec in arms if kind == "method")
    folders = dict(parse_runs(spec) for kind, spec in arms if kind == "runs")  # runs made before: read, not run
    labels = [spec.partition("=")[0] for _, spec in arms]
    if len(labels) < 2:
        raise CompareError("give at least two arms: --method LABEL=FLAGS (runs made here) or --runs LABEL=DIR[,DIR...] "
                           "(train.py runs already made); the first is the baseline")
    if len(set(labels)) != len(labels):
        raise CompareError(f"two arms share a label: {', '.join(labels)}")
    for m in (metric, *secondary):
        if m.kind == "eval" and a.no_eval:
            raise CompareError(f"--metric / --also {m.spec} needs eval.py; drop --no_eval")
    seeds = arm_seeds(a, methods, folders)
    requested = list(seeds)
    common = shlex.split(a.train_args)
    refuse_owned_flags(common, "--train_args")
    eval_args = shlex.split(a.eval_args)
    refuse_owned_flags(eval_args, "--eval_args")
    baseline = labels[0]
    planned = []  # (label, seed, key, train_argv, eval_argv, config), validated before anything runs
    for label, flags in methods.items():
        refuse_owned_flags(flags, f"--method {label}")
        for seed in seeds:
            argv = [*common, *flags, "--seed", str(seed), "--resume", "none"]
            config = resolved_config([*argv, "--output_dir", os.path.join(a.cache_dir, "unused")], f"--method {label}")
            eval_argv = None if a.no_eval else eval_argv_for(eval_args, config)
            planned.append((label, seed, run_key(config, eval_argv, a.num_gpus), argv, eval_argv, config))
    order = sorted(planned, key=lambda p: (seeds.index(p[1]), list(methods).index(p[0])))  # seed-major: pairs first
    by_command = runs_by_command(a.cache_dir)  # a run archived by an older credo, whose key has changed since
    # A sweep continued on another machine (a fresh clone: an empty cache) takes the runs its committed archive holds.
    archived = runs_by_command(a.archive) if a.archive else {}

    def run_dir_of(key, argv, eval_argv):
        for root in (a.cache_dir, a.archive):
            own = os.path.join(root, key[:20]) if root else None
            if own and os.path.exists(os.path.join(own, "run.json")):
                return own
        command = command_id(argv, eval_argv)
        return by_command.get(command) or archived.get(command) or os.path.join(a.cache_dir, key[:20])
    done = lambda p: os.path.exists(os.path.join(run_dir_of(p[2], p[3], p[4]), "run.json"))  # noqa: E731
    if a.plan:
        for p in order:
            print(f"compare: {p[0]} seed {p[1]}: {'cached' if done(p) else 'to run'} ({p[2][:20]})")
        return None
    sweep_json = os.path.join(a.cache_dir, f"{a.name}.sweep.json")
    if a.archive:
        restore_sweep_file(sweep_json, a.archive)
    preregister(sweep_json, metric, baseline)
    if a.archive:
        archive_sweep_file(sweep_json, a.archive)
    if a.partial:
        plans = {(p[0], p[1]): p for p in planned}
        seeds = complete_seeds(seeds, methods, lambda label, seed: done(plans[label, seed]))
        if not seeds:
            raise CompareError(f"--partial: no seed is finished under every method in {a.cache_dir}")
        planned = [p for p in planned if p[1] in seeds]
        order = [p for p in order if p[1] in seeds]
    ran = []
    for label, seed, key, argv, eval_argv, config in order:
        run_dir = run_dir_of(key, argv, eval_argv)
        if done((label, seed, key, argv, eval_argv)):
            print(f"compare: {label} seed {seed}: cached ({run_dir})", flush=True)
        else:
            print(f"compare: {label} seed {seed}: running ({run_dir})", flush=True)
            execute_run(run_dir, argv, eval_argv, a.num_gpus, {"key": key, "method": label, "seed": seed,
                        "train_argv": argv, "eval_argv": eval_argv, "config": config, "commit": git_commit()},
                        keep_checkpoints=a.keep_checkpoints, restart_interrupted=a.restart_interrupted)
            ran.append(key)
        if a.archive and os.path.dirname(run_dir) != a.archive:  # a run taken from the archive is archived already
            archive_run(run_dir, a.archive)
    runs = {label: [] for label in labels}
    for label, seed, key, argv, eval_argv, config in planned:
        run_dir = run_dir_of(key, argv, eval_argv)
        with open(os.path.join(run_dir, "run.json")) as f:
            record = json.load(f)
        value, censored = metric_value(metric, run_dir, config["max_steps"])
        also = {m.spec: metric_value(m, run_dir, config["max_steps"])[0] for m in secondary}
        runs[label].append({"seed": seed, "value": value, "censored": censored, "also": also, "key": key,
                            "run_dir": run_dir,
                            "ran_this_invocation": key in ran, "commit": record["commit"],
                            "resumed_from": record.get("resumed_from"), "train_seconds": record.get("train_seconds"),
                            "eval_seconds": record.get("eval_seconds")})
    for label, folder_runs in folders.items():
        for seed in seeds:
            folder, config = folder_runs[seed]
            value, censored = metric_value(metric, folder, config["flags"]["max_steps"])
            also = {m.spec: metric_value(m, folder, config["flags"]["max_steps"])[0] for m in secondary}
            runs[label].append({"seed": seed, "value": value, "censored": censored, "also": also,
                                **folder_record(folder, config)})
    comparisons = {f"{label} vs {baseline}": paired([r["value"] for r in runs[label]], [r["value"] for r in runs[baseline]])
                   for label in labels if label != baseline}
    secondary_comparisons = {m.spec: {f"{label} vs {baseline}": paired([r["also"][m.spec] for r in runs[label]],
                                                                        [r["also"][m.spec] for r in runs[baseline]])
                                      for label in labels if label != baseline} for m in secondary}
    described = {**{k: shlex.join(v) for k, v in methods.items()},
                 **{k: "runs: " + ", ".join(runs[seed][0] for seed in seeds) for k, runs in folders.items()}}
    resolved = {**{label: next(p[5] for p in planned if p[0] == label) for label in methods},
                **{label: runs[seeds[0]][1]["flags"] for label, runs in folders.items()}}
    return {"name": a.name, "partial": bool(a.partial) and len(seeds) < len(requested),
            "deciding_metric": {"spec": metric.spec, "description": metric.describe(),
                                                "higher_is_better": metric.higher_is_better},
            "baseline": baseline, "seeds": seeds, "methods": {label: described[label] for label in labels},
            "config": {"train_args": a.train_args, "eval_args": None if a.no_eval else a.eval_args,
                       "num_gpus": a.num_gpus, "cache_dir": a.cache_dir,
                       "resolved": {label: resolved[label] for label in labels}},
            "runs": runs, "comparisons": comparisons, "secondary_comparisons": secondary_comparisons,
            "between_methods": between_methods(runs, baseline, [metric.spec, *(m.spec for m in secondary)]),
            "ran_this_invocation": len(ran), "commit": git_commit()}


def report(result: dict) -> str:
    metric = result["deciding_metric"]
    lines = [f"# {result['name']}: paired comparison over {len(result['seeds'])} seeds\n",
             *(["**Partial**: the sweep is not finished; these are the seeds finished under every method.\n"]
               if result.get("partial") else []),
             f"Deciding metric (pre-registered): `{metric['spec']}`: {metric['description']}.\n",
             f"Baseline: {result['baseline']}. Methods: " + "; ".join(f"{k}: `{v}`" for k, v in result["methods"].items()),
             f"\nCommon train.py flags: `{result['config']['train_args']}`; eval.py flags: "
             f"`{result['config']['eval_args']}`; {result['config']['num_gpus']} rank(s); commit {result['commit']}.\n",
             "| seed | " + " | ".join(result["runs"]) + " |", "|---|" + "---|" * len(result["runs"])]
    for i, seed in enumerate(result["seeds"]):
        cells = [f"{r[i]['value']:.4g}{' (censored)' if r[i]['censored'] else ''}" for r in result["runs"].values()]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    runs = [(label, r) for label, rs in result["runs"].items() for r in rs]
    lines.append("\nRuns trained at commit(s) " + ", ".join(sorted({r["commit"][:12] for _, r in runs})) + "; " + (
        "continued after an interruption: " + ", ".join(f"{label} seed {r['seed']} (from {r['resumed_from']})"
                                                         for label, r in runs if r.get("resumed_from") is not None)
        if any(r.get("resumed_from") is not None for _, r in runs) else "none was resumed after an interruption") + ".")
    lines += ["\nPaired differences (a - b; " + ("higher" if metric["higher_is_better"] else "lower") +
              " is better):\n", PAIRED_HEADER]
    lines += [format_paired_row(label, c, digits=4) for label, c in result["comparisons"].items()]
    for spec, comps in result.get("secondary_comparisons", {}).items():
        lines += [f"\nSecondary, not deciding: `{spec}` (a - b):\n", PAIRED_HEADER]
        lines += [format_paired_row(label, c, digits=4) for label, c in comps.items()]
    for spec, comps in result.get("between_methods", {}).items():
        lines += [f"\nBetween the non-baseline methods, not pre-registered: `{spec}` (a - b):\n", PAIRED_HEADER]
        lines += [format_paired_row(label, c, digits=4) for label, c in comps.items()]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> bool:
    """Per-seed values, a line per seed across methods; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare: matplotlib is not installed (pip install -r requirements-bench.txt): no PNG", flush=True)
        return False
    labels = list(result["runs"])
    fig, ax = plt.subplots(figsize=(1.8 * len(labels) + 2, 4))
    for i, seed in enumerate(result["seeds"]):
        ax.plot(range(len(labels)), [result["runs"][m][i]["value"] for m in labels], "o-", alpha=0.6, label=f"seed {seed}")
    means = [sum(r["value"] for r in result["runs"][m]) / len(result["seeds"]) for m in labels]
    ax.plot(range(len(labels)), means, "k_", markersize=30, mew=3, label="mean")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel(result["deciding_metric"]["spec"])
    ax.set_title(result["name"])
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="sweep name: the report is CACHE_DIR/NAME.md (.json, .png)")
    p.add_argument("--method", action="append", dest="arms", type=lambda spec: ("method", spec), default=[],
                   help="LABEL=FLAGS: an arm of runs made here (repeat; the first arm is the baseline)")
    p.add_argument("--runs", action="append", dest="arms", type=lambda spec: ("runs", spec),
                   help="LABEL=DIR[,DIR...]: an arm of train.py output folders already made, one per seed (its "
                        "config.json's --seed); read, never run")
    p.add_argument("--seeds", default=None,
                   help="comma list of seeds, the same for every arm (default 1,2,3, or with only --runs arms the "
                        "seeds they share)")
    p.add_argument("--metric", required=True, help="the deciding metric (see above); fixed at the first invocation")
    p.add_argument("--also", action="append", default=[],
                   help="a secondary metric (same forms), reported per seed and paired but not deciding (repeat)")
    p.add_argument("--train_args", default="", help="train.py flags common to every run (default none)")
    p.add_argument("--eval_args", default="", help="eval.py flags (default none: the run's env and dtype)")
    p.add_argument("--no_eval", action="store_true", help="skip eval.py (only train metrics; default off)")
    p.add_argument("--keep_checkpoints", action="store_true",
                   help="keep each finished run's resumable checkpoints (default off: removed once the run is "
                        "done, since a finished run never resumes; its final export is kept)")
    p.add_argument("--restart_interrupted", action="store_true",
                   help="start an interrupted run over instead of continuing it from its latest checkpoint "
                        "(default off)")
    p.add_argument("--num_gpus", type=int, default=1, help="ranks per run, the deepspeed launcher's --num_gpus (default 1)")
    p.add_argument("--cache_dir", default=os.path.join(REPO, "output", "compare"),
                   help="one folder per run, named by its config hash (default output/compare)")
    p.add_argument("--results", default=None,
                   help="output prefix (default CACHE_DIR/NAME, git-ignored; the committed sweeps pass "
                        "experiments/results/NAME)")
    p.add_argument("--plan", action="store_true", help="validate every run's flags, list cached / to-run, run nothing")
    p.add_argument("--archive", default=None,
                   help="copy each finished run's report inputs (no model) into this folder (default: none)")
    p.add_argument("--partial", action="store_true",
                   help="run nothing; report the seeds finished under every method, labelled partial (default off)")
    a = p.parse_args(argv)
    a.method = [spec for kind, spec in a.arms if kind == "method"]
    a.cache_dir = os.path.abspath(a.cache_dir)
    a.archive = os.path.abspath(a.archive) if a.archive else None
    for folder in (a.cache_dir, a.archive):  # a committed archive (DIR.tar.gz) is read as the folder it packs
        if folder:
            unpacked(folder)
    if a.archive == a.cache_dir:  # reproducing from the archive with the sweep's own flags: it is its own archive
        a.archive = None
    prefix = a.results or os.path.join(a.cache_dir, a.name)
    try:
        result = sweep(a)
    except CompareError as exc:
        sys.exit(f"compare.py: error: {exc}")
    except run_child.Interrupted as exc:  # the run saved its checkpoint (if it had started training) and stopped
        print(f"compare.py: {exc}; run the same command again to continue it", file=sys.stderr, flush=True)
        sys.exit(128 + exc.signum)
    if result is None:  # --plan
        return None
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    result["png"] = plot(result, prefix + ".png")
    from benchmarks.results_io import write_results
    write_results(result, prefix, report)
    return result


if __name__ == "__main__":
    main()
