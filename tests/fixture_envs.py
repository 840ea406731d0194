"""Envs for the launcher tests. A random tiny model almost never gets a sum right, so arith's 0/1 score would
leave every group constant and every advantage 0: these give dense, learnable (or failing) scores."""
import itertools

from envs.arith import ArithEnv


class DigitFractionEnv(ArithEnv):
    """Score = fraction of the response's characters that are digits; multi-turn like arith (done at score 1)."""

    @classmethod
    def make_verifier(cls, **kwargs):
        return lambda prompt, text, sample: sum(c.isdigit() for c in text) / max(len(text), 1)


class BrokenVerifierEnv(ArithEnv):
    """A verifier that always raises, as a reward server that is down would."""

    @classmethod
    def make_verifier(cls, **kwargs):
        def broken(prompt, text, sample):
            raise ConnectionError("reward server unreachable")
        return broken


class DownAfterFirstStepEnv(DigitFractionEnv):
    """A verifier that answers the first step's calls (8: the launcher tests' 2 prompts x 4 responses on one rank)
    and then raises, as a reward server that goes down mid-run would."""

    @classmethod
    def make_verifier(cls, **kwargs):
        score, calls = super().make_verifier(**kwargs), itertools.count(1)

        def down_after_first_step(prompt, text, sample):
            if next(calls) > 8:
                raise ConnectionError("reward server unreachable")
            return score(prompt, text, sample)
        return down_after_first_step


def half_reward(prompt, completion, sample):
    """A user reward with two components, one of which abstains."""
    return {"half": 0.5, "judge": None}


class RankZeroSolvesEnv(ArithEnv):
    """Every episode on rank 0 is solved at turn 1; on the other ranks every turn fails, so those ranks play all
    --max_turns turns (and have non-improving turns for TCPO's counterfactuals) while rank 0 has nothing left."""

    @classmethod
    def make_verifier(cls, **kwargs):
        import os
        return lambda prompt, text, sample: 1.0 if os.environ.get("RANK", "0") == "0" else 0.0


class TaskIdEnv(ArithEnv):
    """An env whose rows name a task by id (as AppWorld's do): it needs no prompt or answer field."""

    @classmethod
    def data_keys(cls, prompt_key, answer_key):
        return ("task_id",)


class StrResetEnv(ArithEnv):
    """A first attempt at a user env: reset returns the prompt text instead of chat messages."""

    def reset(self, sample):
        return super().reset(sample)[-1]["content"]


class FloatStepEnv(ArithEnv):
    """A user env whose step returns the bare score instead of a StepResult."""

    def step(self, model_text):
        return super().step(model_text).score


class PartsEnv(DigitFractionEnv):
    """Single-turn; its StepResult carries two named components and numeric and text info, as a user env's would."""

    def step(self, model_text):
        from envs.base import StepResult
        digits = sum(c.isdigit() for c in model_text) / max(len(model_text), 1)
        return StepResult(observation=[], score=digits, components={"digits": digits, "brevity": 1.0}, done=True,
                          info={"chars": len(model_text), "solved": digits >= 1.0, "note": "text is not a metric"})


class FirstTurnSolvedEnv(ArithEnv):
    """Turn 1 is always solved; a later turn keeps the solution when the response has an even number of characters
    and breaks it otherwise, so a random tiny model both preserves and regresses (TCPO's pres and reg credit)."""

    def score_turn(self, model_text):
        return 1.0 if self.turn == 0 or len(model_text) % 2 == 0 else 0.0


class HalfSilentEnv(ArithEnv):
    """DigitFractionEnv's dense score on prompts whose answer is even, 0 on every response to the others: about half
    the groups have no reward spread (dynamic sampling's test)."""

    @classmethod
    def make_verifier(cls, **kwargs):
        def score(prompt, text, sample):
            if int(sample["answer"]) % 2:
                return 0.0
            return sum(c.isdigit() for c in text) / max(len(text), 1)
        return score


class OtherDataOnRankOneEnv(DigitFractionEnv):
    """Rank 1 generates other training rows than rank 0, as a node reading an edited copy of the data file would
    (the pre-flight check's test)."""

    @classmethod
    def dataset(cls, split, n, seed):
        import os
        return super().dataset(split, n, seed + (1 if os.environ.get("RANK") == "1" else 0))


class LateRankOneEnv(DigitFractionEnv):
    """Rank 1 takes 25 s to read its training rows (after the process group formed: the flags' check draws one row),
    as a rank stuck on a slow file system would."""

    @classmethod
    def dataset(cls, split, n, seed):
        import os
        import time
        if os.environ.get("RANK") == "1" and n > 1:
            time.sleep(25)
        return super().dataset(split, n, seed)
