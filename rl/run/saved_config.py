"""What keeps two runs from mixing: the resolved config of a run (OUTPUT_DIR/config.json), which of its flags define
the experiment, the default output folder per experiment, and the lock that keeps a second trainer out.
"""
import datetime
import fcntl
import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys

import torch

from rl import REPO_ROOT
from rl.engine.hardware import auto_dtype_name, cpu_bf16_matmul_isa, cpu_model
from rl.errors import TrainingAborted

CONFIG_NAME = "config.json"
LOCK_NAME = ".trainer.lock"
# A crash that is not a signal loses the steps since the last save; measured on this machine (README, "Checkpoints"):
SAVE_COST = ("A full save of SmolLM2-135M (fp32 weights and Adam moments) is 1.6 GB and took 13-23 s on a 2-core "
             "CPU, the more when it was busy (benchmarks/results/checkpoint_cost.md).")
# At the CPU default's ~20 s per step a save every 20 steps costs ~5% of the run; a crash loses at most ~7 minutes.
DEFAULT_SAVE_STEPS = 20
VERSIONED_PACKAGES = ("torch", "deepspeed", "transformers", "tokenizers", "datasets", "numpy", "math-verify", "vllm")

# Flags that change how a run is carried out, kept or logged, but not what it learns: a resume may change them
# freely. Every other flag (method, data, model, rewards, optimisation, dtype, sampling) defines the experiment,
# and `--resume auto` refuses to continue a checkpoint trained with other values. A flag missing from this list
# counts as method-defining, so a newly added flag is safe by default. credo's reading: the rollout backend, the
# decode loop (its attention kernel, packed weights) and the ZeRO/offload settings change speed and memory, not the
# method, so a run may move between machines; --max_steps may be raised to train a finished run further.
HARMLESS_FLAGS = frozenset({
    "max_steps", "enable_test_mode", "test_stop_step",
    "output_dir", "resume", "save_strategy", "save_steps", "save_total_limit", "save_model_only_steps", "no_final_export",
    "enable_tensorboard", "tensorboard_path",
    "local_rank", "dist_timeout_minutes", "heartbeat_timeout_s",
    "actor_zero_stage", "offload", "enable_hybrid_engine",
    "rollout_backend", "decode_loop", "decode_attention", "cpu_packed_weights",
    "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_sleep_level",
    "code_workers", "skip_bad_rows", "max_reward_error_rate", "max_bad_steps",
    "gradient_checkpointing", "eval_steps", "eval_limit", "eval_data_path", "eval_data_split",
    "filter_groups_max_rounds",  # only whether a step may stop the run; raised to resume a run stopped at the cap
    "eval_before_train", "eval_n", "eval_temperature", "save_best_metric",
    "report_to", "wandb_project", "wandb_run_name",
})
# values the parser derives from flags that are compared themselves (a config.json from before one existed lacks it)
DERIVED_VALUES = frozenset({"uses_reference"})


class RunMismatch(TrainingAborted):
    """--resume auto found a run with other method-defining flags."""


class OutputDirBusy(TrainingAborted):
    """Another trainer holds the output folder's lock."""


def default_output_dir(algo: str, env: str, now: datetime.datetime = None) -> str:
    """output/<algo>_<env>_<UTC timestamp>: a new folder per experiment (verl names runs the same way)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    env_name = re.sub(r"[^A-Za-z0-9]+", "-", env.replace(":", ".").split(".")[-1]).strip("-").lower() or "env"
    return os.path.join("output", f"{algo}_{env_name}_{now.strftime('%Y%m%d_%H%M%S')}")


def plain_flags(args) -> dict:
    """The parsed flags as JSON values (lists stay lists; anything else odd becomes its str)."""
    return json.loads(json.dumps(vars(args), default=str))


def method_flags(flags: dict) -> dict:
    return {k: v for k, v in flags.items() if k not in HARMLESS_FLAGS and k not in DERIVED_VALUES}


def flag_differences(saved: dict, current: dict, defaults: dict) -> list:
    """`--name old -> new` for each method-defining flag whose value differs. A flag that one side does not record
    (a credo version that lacked it) differs only when the other side's value is not its default."""
    out = []
    for name in sorted(set(method_flags(saved)) | set(method_flags(current))):
        missing = object()
        old, new = saved.get(name, missing), current.get(name, missing)
        default = json.loads(json.dumps(defaults.get(name), default=str))
        old = default if old is missing else old
        new = default if new is missing else new
        if old != new:
            out.append(f"--{name} {_show(old)} -> {_show(new)}")
    return out


def _show(value) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def package_versions() -> dict:
    versions = {"python": sys.version.split()[0]}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def git_commit() -> str:
    """HEAD of the checkout, with `-dirty` when tracked files have changes; None outside a git checkout."""
    def git(*cmd):
        return subprocess.run(["git", "-C", REPO_ROOT, *cmd], capture_output=True, text=True, timeout=10)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def machine_record(dtype_flag: str) -> dict:
    """What decides a run's floating-point results besides its flags, commit and versions: the processor (its kind
    picks the matmul kernels, and with them the order of every sum), the threads each rank computes with (they split
    the sums), the dtype --dtype resolved to, and the GPU. Two runs repeat bit for bit only where all of these match
    (docs/reproducibility.md)."""
    cuda = torch.cuda.is_available()
    record = {"cpu": cpu_model(), "bf16_isa": cpu_bf16_matmul_isa() or "none", "torch_threads": torch.get_num_threads(),
              "dtype": auto_dtype_name(cuda)[0] if dtype_flag == "auto" else dtype_flag}
    if cuda:
        record["gpu"] = torch.cuda.get_device_name()
    return record


def machine_differences(saved: dict, current: dict) -> list:
    """["torch_threads 2 -> 1", ...]: what differs between two machine records (an old config.json has none: [])."""
    if not saved:
        return []
    return [f"{k} {saved.get(k)} -> {current.get(k)}" for k in sorted(set(saved) | set(current))
            if saved.get(k) != current.get(k)]


def resolved_config(flags: dict, dtype: str, world_size: int) -> dict:
    """config.json: every flag (plain_flags), the rank count, the versions, the machine (its record for --dtype)."""
    return {"flags": flags, "world_size": world_size, "versions": package_versions(),
            "machine": machine_record(dtype), "git_commit": git_commit(), "argv": sys.argv[1:],
            "written_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_run_config(output_dir: str, config: dict):
    path = os.path.join(output_dir, CONFIG_NAME)
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def read_run_config(output_dir: str):
    """OUTPUT_DIR/config.json, or None when there is none."""
    path = os.path.join(output_dir, CONFIG_NAME)
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TrainingAborted(f"{path} is unreadable ({exc}); move it away to start a new run in "
                              f"{output_dir}") from None
    if not isinstance(config, dict) or not isinstance(config.get("flags"), dict):
        raise TrainingAborted(f"{path} is not a credo run config (no `flags` object)")
    return config


_held_locks = {}  # real path -> open lock file: held as long as the process (the rank), whatever kills its launcher


def acquire_output_lock(output_dir: str):
    """Take an exclusive flock on OUTPUT_DIR/.trainer.lock for the life of this process, or raise OutputDirBusy
    naming the holder. The kernel drops the lock when the holder dies however it dies, so a crash leaves no stale
    lock; a rank orphaned by a killed launcher keeps it, as it keeps training."""
    try:
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.realpath(os.path.join(output_dir, LOCK_NAME))
        if path in _held_locks:
            return _held_locks[path]
        f = open(path, "a+")
    except OSError as exc:
        raise TrainingAborted(f"--output_dir {output_dir}: cannot be created or written ({exc})") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "a process that has not written its pid yet"
        f.close()
        raise OutputDirBusy(f"--output_dir {output_dir} is in use by another trainer ({holder}). Two runs in one "
                            f"folder would mix their checkpoints and metrics: wait for it to end, stop it, or pick "
                            f"another --output_dir") from None
    f.seek(0)
    f.truncate()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    f.write(f"pid {os.getpid()} on {socket.gethostname()} since {started}\n")
    f.flush()
    _held_locks[path] = f
    return f


def release_output_lock(output_dir: str):
    """Let go of the lock before the process ends (for callers that run several trainers in one process)."""
    f = _held_locks.pop(os.path.realpath(os.path.join(output_dir, LOCK_NAME)), None)
    if f is not None:
        f.close()
