"""train.py with finer step timers, for the throughput benchmarks: launch it exactly like train.py.

    deepspeed --num_gpus 1 benchmarks/credo_timed_train.py --dtype fp32 ...

The trainer already logs time/{gather,generate,reward,train,step}. This wraps, from outside and without changing
the training code, the three parts of time/train: the log-prob forward (`rl.update.ppo.response_logprobs`), the
engine's backward and its optimizer step, and adds time/logprobs, time/backward, time/optimizer_step to each
step's metrics. These three are rank 0's own times (the trainer's keys are the slowest rank's).
"""
import functools
import os
import runpy
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PHASES = {}
COUNTS = {}


def _timed(fn, phase):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[phase] = PHASES.get(phase, 0.0) + time.perf_counter() - t0
    return wrapper


def _counted(fn):
    """Counts the update's forward shapes for benchmarks/bench_limit.py's FLOPs: tokens through the body (padded
    micro-batch rows x columns) and positions through the LM head (rows x (response length + 1))."""
    @functools.wraps(fn)
    def wrapper(model, input_ids, attention_mask, prompt_len, *args, **kwargs):
        rows, columns = input_ids.shape
        COUNTS["update_seq_tokens"] = COUNTS.get("update_seq_tokens", 0) + rows * columns
        COUNTS["update_head_tokens"] = COUNTS.get("update_head_tokens", 0) + rows * (columns - prompt_len + 1)
        return fn(model, input_ids, attention_mask, prompt_len, *args, **kwargs)
    return wrapper


def install():
    import rl.update.ppo as update_module
    from rl.trainer import Trainer

    # ppo_update calls the module-level name, so rebinding it times every log-prob forward of the update (the
    # no-grad reference / old-policy passes go through rl.update.batching's own name and are not counted).
    update_module.response_logprobs = _timed(_counted(update_module.response_logprobs), "logprobs")
    original_init, original_step = Trainer.__init__, Trainer.train_step

    def init(self, args):
        original_init(self, args)
        self.actor.backward = _timed(self.actor.backward, "backward")
        self.actor.step = _timed(self.actor.step, "optimizer_step")

    def train_step(self):
        PHASES.clear()
        COUNTS.clear()
        metrics = original_step(self)
        metrics.update({f"time/{k}": v for k, v in PHASES.items()})
        metrics.update({f"count/{k}": v for k, v in COUNTS.items()})
        return metrics

    Trainer.__init__, Trainer.train_step = init, train_step


if __name__ == "__main__":
    install()
    # train.py is a script beside the packages, not one of them: run it as the launcher would
    runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")
