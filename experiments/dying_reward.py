"""The rewards of the worker_deaths sweep (issue #51 item 3): arith correctness scored in a reward worker process
(rewards/worker_pool.py), once cleanly and once by a worker that dies at random.

    --reward_funcs experiments.dying_reward:arith_correct          the env's verifier, run in the worker
    --reward_funcs experiments.dying_reward:arith_correct_dying    the same, but the worker SIGKILLs itself first
                                                                   on DEATH_RATE of its calls

The fault is a real worker death, the one the OOM killer deals: the process that runs the call gets SIGKILL, its
reply never comes, and the trainer sees its pipe close (rewards/worker_pool.py reports "killed by SIGKILL"). It is
injected here, in a user reward function named by a flag, so that the training code carries no fault hook and the
sweep's cache key (its flags) tells the arms apart. Each call draws its death from the OS's randomness
(random.SystemRandom), independently of the response and of the call's earlier attempt: deaths are not repeatable
run to run, and a retried call dies again with the same DEATH_RATE.
"""
import os
import random
import signal

from rewards.arith import ArithVerifier

DEATH_RATE = 0.3
_verifier = ArithVerifier()
_draw = random.SystemRandom()


def arith_correct(prompt, completion, sample) -> float:
    """1 when the response's final integer is the answer (the arith env's correctness), computed in the worker."""
    return _verifier(prompt, completion, sample)


def arith_correct_dying(prompt, completion, sample) -> float:
    """arith_correct, after killing this worker process on DEATH_RATE of calls."""
    if _draw.random() < DEATH_RATE:
        os.kill(os.getpid(), signal.SIGKILL)
    return _verifier(prompt, completion, sample)
