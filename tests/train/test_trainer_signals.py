import signal
from types import SimpleNamespace

from rl.trainer import Trainer


def _announce(step, steps, capsys):
    trainer = SimpleNamespace(step=step, steps=steps, rank=0, stop_signal=None)
    Trainer._on_signal(trainer, signal.SIGTERM, None)
    return trainer.stop_signal, capsys.readouterr().out


def test_a_signal_during_a_step_announces_that_step(capsys):
    name, out = _announce(1, 3, capsys)
    assert name == "SIGTERM" and "finishing step 2" in out


def test_a_signal_after_the_last_step_announces_no_step_that_does_not_exist(capsys):
    _, out = _announce(3, 3, capsys)
    assert "step 4" not in out and "last step (3) is done" in out
