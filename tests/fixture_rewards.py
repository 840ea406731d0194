"""User reward functions for the reward tests, given to credo by import path as a user would."""
import hashlib
import os
import signal
import subprocess
import sys
import time


def hangs(prompt, completion, sample):
    """A reward whose call never returns (a judge API that never answers)."""
    time.sleep(3600)
    return 1.0


def always_raises(prompt, completion, sample):
    raise ValueError("judge API key missing")


def digit_fraction(completions, **kwargs):
    """TRL's convention, unchanged: batched, dense (a random tiny model gets a spread of values)."""
    return [sum(ch.isdigit() for ch in text) / max(len(text), 1) for text in completions]


def echo_trl_kwargs(prompts, completions, completion_ids, trainer_state, answer, **kwargs):
    """TRL-style: returns what it was given, so a test can check the keyword arguments TRL would pass."""
    assert len(prompts) == len(completions) == len(completion_ids) == len(answer)
    return [None if a == "abstain" else float(a) + 1000 * trainer_state.global_step + len(ids)
            for a, ids in zip(answer, completion_ids)]


def spawns_a_child_and_hangs(prompt, completion, sample):
    """Starts a process of its own, records its pid, then hangs: the timeout must kill the child too."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(sample["pid_file"], "w") as f:
        f.write(str(child.pid))
    time.sleep(3600)


def prints_then_scores(prompt, completion, sample):
    print("debug output a user left in their reward", flush=True)
    os.write(1, b"and one written to fd 1 directly\n")
    return 0.25


def exits_mid_call(prompt, completion, sample):
    os._exit(3)


def not_a_reward(text):
    return 1.0


def trl_without_kwargs(prompts, completions):
    return [0.0 for _ in completions]


def chunk_size(completions, **kwargs):
    """TRL-style: reports how many completions each call was given."""
    return [float(len(completions))] * len(completions)


# --- deaths of the worker process itself (issue #51 item 3: a failure outside the response is retried once) ---

def waits_to_be_killed(prompt, completion, sample):
    """Writes its worker's pid into sample["pid_dir"] and waits there for the test to SIGKILL it (as the OOM killer
    would). Once sample["deaths"] earlier attempts have left their pid, it scores 0.75 instead."""
    earlier = os.listdir(sample["pid_dir"])
    with open(os.path.join(sample["pid_dir"], str(os.getpid())), "w"):
        pass
    if len(earlier) >= sample["deaths"]:
        return 0.75
    time.sleep(3600)


def dies_on_poison(prompt, completion, sample):
    """Kills its own worker with SIGKILL on a completion containing "poison" (every time), else scores 1."""
    if "poison" in completion:
        os.kill(os.getpid(), signal.SIGKILL)
    return 1.0


def dies_once_per_completion(prompt, completion, sample):
    """Kills its own worker the first time it sees a completion (a marker file in sample["marker_dir"] remembers),
    then scores it 1: every call fails once and recovers on its retry."""
    marker = os.path.join(sample["marker_dir"], hashlib.sha1(completion.encode()).hexdigest())
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return 1.0


def refused_connection_once(prompt, completion, sample):
    """A remote verifier that refuses the first connection of each completion (marker files as above), then scores."""
    marker = os.path.join(sample["marker_dir"], "refused-" + hashlib.sha1(completion.encode()).hexdigest())
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise ConnectionRefusedError("judge server refused the connection")
    return 0.5


def counts_and_raises(prompt, completion, sample):
    """An ordinary exception, the response's: counts its attempts in sample["marker_dir"] (it must not be retried)."""
    with open(os.path.join(sample["marker_dir"], f"attempt-{os.getpid()}-{time.monotonic_ns()}"), "w"):
        pass
    raise ValueError("cannot parse this completion")
