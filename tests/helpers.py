"""Test helpers: a tiny random Llama with a character tokenizer built in code, a real-launcher runner, and train.py's
main() run in the test process."""
import contextlib
import io
import os
import string
import subprocess
import sys
import traceback

from benchmarks.ports import free_port  # noqa: F401 - the tests take it from here

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The flags of the session's one 2-rank ZeRO-3 run (tests/conftest.py's zero3_two_rank_run, read by
# test_train_deepspeed, test_fault_tolerance and test_validation): the tiny Llama on DigitFractionEnv, 8 rows read 2
# ranks x 2 prompts a step (step 2 ends an epoch), 4 steps, a reference for the KL that moves halfway to the policy
# after step 2 (--sync_ref_model: test_fault_tolerance's stop and resume at step 2 then checks that the checkpoint
# carries the mixed reference). A test that needs this run with one more flag launches that and compares it against
# the shared run.
ZERO3_TWO_RANK_RUN = ["--env", "tests.fixture_envs:DigitFractionEnv", "--num_generations", "4",
                      "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "12", "--temperature", "1.0",
                      "--actor_learning_rate", "1e-2", "--num_train_samples", "8", "--max_steps", "4",
                      "--actor_zero_stage", "3", "--beta", "0.05", "--sync_ref_model", "--ref_model_sync_steps", "2",
                      "--ref_model_mixup_alpha", "0.5"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    chars = sorted(set(string.printable))
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
                                  bos_token="<|im_start|>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(out_dir: str, seed: int = 0, hidden_size: int = 32, num_attention_heads: int = 4,
                     num_key_value_heads: int = 2) -> str:
    """Save a 2-layer random Llama (about 60k parameters at the defaults) and its tokenizer as an HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_char_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=num_attention_heads,
                         num_key_value_heads=num_key_value_heads, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.bos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    return out_dir


def build_tiny_reward_model(model_dir: str, out_dir: str, seed: int = 1) -> str:
    """Save a random one-output sequence classifier on the tiny model's config and tokenizer (a `pref` reward model)."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForSequenceClassification

    config = AutoConfig.from_pretrained(model_dir)
    config.num_labels = 1
    torch.manual_seed(seed)
    LlamaForSequenceClassification(config).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out_dir)
    return out_dir


def run_train(args: list, num_ranks: int = 1, timeout: int = 600, launcher: bool = True, port: int = None,
              faults: list = None, pythonpath: list = ()):
    """Run train.py under the real `deepspeed` launcher (or plain python with launcher=False); with `faults`
    (tests/faults.py's flags, e.g. ["--nan_loss_at_steps", "2"]) it runs through tests.faults instead.

    Under `bash scripts/test.sh quick` (CREDO_QUICK_TESTS=1, the tests not marked slow) a launch is an error that
    names the test: every test that runs train.py must carry @pytest.mark.slow, or quick stops being quick."""
    _refuse_in_quick_tests()
    # pythonpath: a user's own folders (their reward or env modules) ahead of the checkout
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([*pythonpath, REPO_ROOT]),
               TOKENIZERS_PARALLELISM="false")
    if "--dtype" not in args:  # --dtype auto means bf16 on AMX / AVX-512 BF16 CPUs: keep the suite's runs exact fp32
        args = [*args, "--dtype", "fp32"]
    script = ["train.py"] if faults is None else ["--module" if launcher else "-m", "tests.faults", *faults]
    if launcher:
        cmd = [os.path.join(os.path.dirname(sys.executable), "deepspeed"), "--num_gpus", str(num_ranks),
               "--master_port", str(port or free_port()), *script, *args]
    else:
        cmd = [sys.executable, *script, *args]
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _refuse_in_quick_tests():
    if os.environ.get("CREDO_QUICK_TESTS") == "1":
        import pytest
        pytest.fail(f"{os.environ.get('PYTEST_CURRENT_TEST', 'this test').split(' ')[0]} launches train.py but is "
                    "not marked slow: add @pytest.mark.slow (or pytestmark = pytest.mark.slow)", pytrace=False)


def run_train_in_process(args: list, faults: list = None, pythonpath: list = ()) -> subprocess.CompletedProcess:
    """train.py's main(ARGS) in this process, read as `python train.py ARGS` (run_train(launcher=False)) would end:
    its exit status (a SystemExit with a message is status 1 with the message on stderr, an uncaught exception status
    1 with its traceback), stdout and stderr (train.py's INFO logging and warnings included). The same one-rank
    DeepSpeed engine and one thread, without a new interpreter's imports of torch, DeepSpeed and transformers (about
    3.5 s of CPU a run); `faults` and `pythonpath` as run_train's (the faults installed for this run only; a kill needs
    a process of its own: run_train). What the run changes in this process is put back afterwards (_as_its_own_process).
    Use run_train where the separate process is the point: a kill, a hang, an orphan, the launcher, ranks."""
    _refuse_in_quick_tests()
    if faults and any(flag.startswith("--kill") for flag in faults):
        raise ValueError(f"{faults}: a run that kills itself needs a process of its own: run_train(..., faults=...)")
    if "--dtype" not in args:
        args = [*args, "--dtype", "fp32"]
    import torch.distributed

    import train
    if torch.distributed.is_initialized():  # e.g. a module's one_rank_process_group: the run would join it, and end it
        raise RuntimeError("run_train_in_process: this process already has a process group; use run_train")
    from tests.faults import installed
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    with _as_its_own_process(["train.py", *args], stderr, pythonpath), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr), installed([*(faults or []), *args]) as train_args:
        try:
            train.main(train_args)
        except SystemExit as exc:
            code = exc.code
        except Exception:  # pytest's own outcomes (a timeout's failure) are BaseExceptions and pass through
            traceback.print_exc()
            code = 1
    if isinstance(code, str):
        stderr.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess(["train.py", *args], code or 0, stdout.getvalue(), stderr.getvalue())


@contextlib.contextmanager
def _as_its_own_process(argv: list, log_stream, pythonpath: list = ()):
    """For the block, this process looks to train.main as `python train.py` under run_train's environment does (one
    thread, the checkout as working directory, `pythonpath` ahead of it, train.py's logging to `log_stream`, warnings
    printed there, not collected by pytest); afterwards everything the run changed is as before: os.environ (train.py
    sets the launcher's variables), argv, sys.path, working directory, threads, the RNG streams, SIGTERM/SIGINT
    handlers, the process group, and the output-dir locks and reward worker pools it took (a process would release
    them by ending)."""
    import logging
    import random
    import signal
    import warnings

    import numpy as np
    import torch

    from rewards import worker_pool
    from rl.run import saved_config
    saved_env, saved_argv, saved_path = dict(os.environ), sys.argv, list(sys.path)
    saved_cwd, threads = os.getcwd(), torch.get_num_threads()
    rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    locks, live_pools = set(saved_config._held_locks), worker_pool._LIVE_POOLS
    root, handler = logging.getLogger(), logging.StreamHandler(log_stream)
    level = root.level
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))  # train.py's format
    os.environ.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([*pythonpath, REPO_ROOT]),
                      TOKENIZERS_PARALLELISM="false")
    sys.argv = argv
    sys.path[:0] = list(pythonpath)
    # a plain set for the run: an env's pool that the run drops unclosed (a process kills it at exit) is still found
    worker_pool._LIVE_POOLS = set()
    os.chdir(REPO_ROOT)
    torch.set_num_threads(1)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()  # a fresh interpreter's filters, printed to stderr
            for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: log_stream.write(
                warnings.formatwarning(message, category, filename, lineno, line))
            yield
    finally:
        for pool in worker_pool._LIVE_POOLS:
            pool.close()
        worker_pool._LIVE_POOLS = live_pools
        for path in set(saved_config._held_locks) - locks:
            saved_config._held_locks.pop(path).close()
        _tear_down_process_group()
        root.removeHandler(handler)
        root.setLevel(level)
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        torch.set_num_threads(threads)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_env)


def default_args(**overrides):
    """train.py's flag defaults as parsed (not validated), with overrides: a test that builds a Scorer or an episode
    driver by hand gets every flag those modules read, including flags added after the test was written."""
    from rl.config import build_parser
    from rl.methods import method_class
    from rl.rollout.episode_end import resolve_episode_end
    args = build_parser().parse_args([])
    vars(args).update(overrides)
    args.episode_end_given = args.episode_end  # resolved as rl.config.validate does
    args.episode_end = resolve_episode_end(args.episode_end, method_class(args.algo).fixed_turns)
    from envs import env_class
    from envs.base import resolve_env_defaults
    resolve_env_defaults(args, env_class(args.env))  # the env's answer length and data keys, as validate fills them
    return args


@contextlib.contextmanager
def one_rank_process_group():
    """An in-process one-rank DeepSpeed process group for a module's fixture, torn down completely afterwards, also
    when the fixture's setup fails: later modules (and the train.py subprocesses they start, which inherit
    os.environ) expect no process group, no launcher variables, no ZeRO-3 config registered with transformers, and
    no DeepSpeed group cached from the old process group (deepspeed.utils.groups keeps its world group)."""
    launcher_env = dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(free_port()))
    saved_env = {key: os.environ.get(key) for key in launcher_env}
    os.environ.update(launcher_env)
    try:
        from rl.engine import dist
        dist.init_distributed()
        yield
    finally:
        _tear_down_process_group()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _tear_down_process_group():
    """No process group, no ZeRO-3 config registered with transformers, no DeepSpeed group cached from the old process
    group (deepspeed.utils.groups keeps its world group): as a new process finds them."""
    import gc

    import deepspeed.utils.groups as ds_groups
    import torch.distributed
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config
    gc.collect()
    unset_hf_deepspeed_config()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    for name in ("_WORLD_GROUP", "_DATA_PARALLEL_GROUP", "_MODEL_PARALLEL_GROUP", "_TENSOR_MODEL_PARALLEL_GROUP",
                 "_ZERO_PARAM_INTRA_PARALLEL_GROUP"):
        if hasattr(ds_groups, name):
            setattr(ds_groups, name, None)


def rewind_run(run_dir: str, out: str, step: int) -> str:
    """A copy of a finished run's folder as a run stopped right after its step-`step` checkpoint leaves it: later
    checkpoints, their metrics lines and the final export removed, `latest` naming step_`step`. Relaunched with the
    same flags, it resumes there (the exact-resume tests compare it with the uninterrupted run)."""
    import json
    import re
    import shutil
    shutil.copytree(run_dir, out)
    root = os.path.join(out, "checkpoints")
    for name in os.listdir(root):
        match = re.fullmatch(r"step_(\d+)", name)
        if match and int(match.group(1)) > step:
            shutil.rmtree(os.path.join(root, name))
    if os.path.isdir(os.path.join(out, "final")):
        shutil.rmtree(os.path.join(out, "final"))
    with open(os.path.join(root, "latest"), "w") as f:
        f.write(f"step_{step}\n")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        kept = [line for line in f if json.loads(line)["step"] <= step]
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.writelines(kept)
    return out
