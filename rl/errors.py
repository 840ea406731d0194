"""Errors that stop a run on purpose, with a message for the user (train.py prints it and exits 1)."""


class TrainingAborted(RuntimeError):
    """The run stopped on purpose (failing rewards, repeated non-finite steps, inconsistent settings)."""


class RewardFailure(TrainingAborted):
    """Too many reward calls of one step failed."""
