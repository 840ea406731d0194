"""Test-only fault injection, installed in-process before train.main() runs: the training code carries none.

    deepspeed --num_gpus 2 --module tests.faults --nan_loss_at_steps 2,3 [train.py flags]
    (tests.helpers.run_train(args, faults=["--nan_loss_at_steps", "2,3"]) builds this command)

--nan_loss_at_steps S,..: every micro-batch loss of those (1-based) steps is multiplied by NaN, as a numerically
    blown-up step would be; the per-token stats stay as computed, the loss and its gradients do not.
--kill_in_save_at_step N: in the save of step N every rank SIGKILLs itself once its files are written, before the
    manifest and the rename (the crash-safety test's "kill during a save").
--kill_in_rollout_at_step N: every rank SIGKILLs itself as step N's episodes start (its prompts already drawn).
--kill_in_update_at_step N: every rank SIGKILLs itself at step N's first micro-batch loss (mid-update: the forward
    done, no backward or optimizer step yet).

Each fault wraps one module-level name the code calls (rl.update.ppo.policy_loss, rl.run.checkpoint.checkpoint_files,
rl.trainer.run_episodes);
if that name is gone after a refactor the install fails loudly instead of silently injecting nothing. `installed`
puts the wrapped names back afterwards, for train.main() run in the test process (tests.helpers.run_train_in_process).
"""
import argparse
import contextlib
import functools
import os
import signal

_current_step = [0]  # the step being trained (1-based), set by the wrapped Trainer.train_step


def _wrap(module, name: str, make_wrapper):
    if not callable(getattr(module, name, None)):
        raise AttributeError(f"tests/faults.py: {module.__name__}.{name} is gone; move this fault to its new home")
    setattr(module, name, functools.wraps(getattr(module, name))(make_wrapper(getattr(module, name))))


def _track_steps():
    from rl.trainer import Trainer
    if getattr(Trainer.train_step, "_credo_tracked", False):
        return
    original = Trainer.train_step

    def train_step(self):
        _current_step[0] = self.step + 1
        return original(self)
    train_step._credo_tracked = True
    Trainer.train_step = train_step


def nan_loss_at_steps(steps):
    """Make the loss of every micro-batch of `steps` (1-based) NaN."""
    import rl.update.ppo
    steps = set(steps)
    _track_steps()

    def make(policy_loss):
        def nan_policy_loss(*args, **kwargs):
            loss, stats = policy_loss(*args, **kwargs)
            return (loss * float("nan") if _current_step[0] in steps else loss), stats
        return nan_policy_loss
    _wrap(rl.update.ppo, "policy_loss", make)


def kill_in_save_at_step(step: int):
    """SIGKILL each rank in save_checkpoint of `step`, after its files are written and before the rename."""
    import rl.run.checkpoint

    def make(checkpoint_files):
        def killing_checkpoint_files(folder):
            if os.path.basename(os.path.normpath(folder)) == f".tmp-step_{step}":
                os.kill(os.getpid(), signal.SIGKILL)
            return checkpoint_files(folder)
        return killing_checkpoint_files
    _wrap(rl.run.checkpoint, "checkpoint_files", make)


def _kill_at_step(module, name: str, step: int):
    """SIGKILL this process when module.name is called during step `step` (1-based)."""
    _track_steps()

    def make(function):
        def killing(*args, **kwargs):
            if _current_step[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)
        return killing
    _wrap(module, name, make)


def kill_in_rollout_at_step(step: int):
    import rl.trainer
    _kill_at_step(rl.trainer, "run_episodes", step)


def kill_in_update_at_step(step: int):
    import rl.update.ppo
    _kill_at_step(rl.update.ppo, "policy_loss", step)


def _steps(text: str) -> list:
    return [int(s) for s in text.split(",") if s]


def install(argv) -> list:
    """Install the faults ARGV names; the train.py flags in ARGV are returned."""
    parser = argparse.ArgumentParser(prog="tests.faults", allow_abbrev=False,
                                     description="train.py with faults injected (tests only)")
    parser.add_argument("--nan_loss_at_steps", type=_steps, default=[], help="comma list of steps (default: none)")
    for fault in ("save", "rollout", "update"):
        parser.add_argument(f"--kill_in_{fault}_at_step", type=int, default=None, help="a step (default: none)")
    faults, train_argv = parser.parse_known_args(argv)
    if faults.nan_loss_at_steps:
        nan_loss_at_steps(faults.nan_loss_at_steps)
    for fault, install_fault in (("save", kill_in_save_at_step), ("rollout", kill_in_rollout_at_step),
                                 ("update", kill_in_update_at_step)):
        if getattr(faults, f"kill_in_{fault}_at_step") is not None:
            install_fault(getattr(faults, f"kill_in_{fault}_at_step"))
    return train_argv


@contextlib.contextmanager
def installed(argv):
    """install(ARGV) for the life of the block; every name a fault wraps is the original again afterwards."""
    import rl.run.checkpoint
    import rl.trainer
    import rl.update.ppo
    from rl.trainer import Trainer
    wrapped = [(rl.update.ppo, "policy_loss"), (rl.run.checkpoint, "checkpoint_files"), (Trainer, "train_step"),
               (rl.trainer, "run_episodes")]
    originals = [(owner, name, getattr(owner, name)) for owner, name in wrapped if hasattr(owner, name)]
    try:
        yield install(argv)
    finally:
        for owner, name, value in originals:
            setattr(owner, name, value)


def main(argv=None):
    train_argv = install(argv)
    import train
    train.main(train_argv)


if __name__ == "__main__":
    main()
