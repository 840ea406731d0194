"""The environment interface every task implements (single- or multi-turn), and verify-and-refine envs."""
import os
from dataclasses import dataclass, field

from rewards.dotted import load_dotted

# the checkout: an env's default eval set is a file under it (data/...), whatever folder a run starts from
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENVS = {}
RETRY_FEEDBACK = "That answer is not correct. Check your work and try again."
# --episode_end max_turns: what follows a correct turn. It never restates the answer (the model sees its own).
SOLVED_FEEDBACK = ("That answer is correct. You may keep it or improve it; give your final answer again in the same "
                   "format.")
EPISODE_ENDS = ("success", "max_turns")
# A turn succeeds when its verifier score is full marks, the one definition for episode ends, training metrics and
# eval.py; the tolerance only absorbs float rounding of a graded score (k of k parts), never a partial answer.
SUCCESS_THRESHOLD = 1.0 - 1e-6


@dataclass
class StepResult:
    observation: list            # chat messages to append before the next turn ([] when done)
    score: float                 # verifier score of this turn, in [0, 1]
    components: dict = field(default_factory=dict)  # named reward parts of the score
    done: bool = True
    info: dict = field(default_factory=dict)


class Env:
    """One episode per instance. Subclasses implement reset/step; `max_turns` bounds the episode.

    Constructors take keyword arguments only: `verifier` (shared by all episodes of a run, made once by
    `make_verifier`), `prompt_key` / `answer_key` (the data fields of --prompt_key / --answer_key, ignored when the
    env generates its own rows) and `max_turns`.
    """

    # What this env brings to the flags, used where a flag does not say otherwise (resolve_env_defaults): the
    # answer length a response of this task needs, the prompt length its rows need, the data fields its rows use,
    # and its held-out eval set.
    default_max_answer_seq_len = 32   # --max_answer_seq_len / eval.py --max_new_tokens, tokens per turn
    default_max_prompt_seq_len = None  # --max_prompt_seq_len; None: the entry point's own (train.py 256, eval.py 1024)
    default_prompt_key = "problem"    # --prompt_key
    default_answer_key = "answer"     # --answer_key
    default_eval_data = None          # eval.py --data_path and train.py --eval_data_path (a repo-relative file)
    # step() may be called again on the same text after it raised a failure outside the response (an OSError, a dead
    # worker: --reward_retries): true where step scores before it changes the episode; an env whose step acts on a
    # world (AppWorld's cell) says False, so a half-done step is never played twice
    step_retryable = True

    def __init__(self, verifier=None, prompt_key: str = "problem", answer_key: str = "answer", max_turns: int = 1,
                 **unused):
        self.verifier = verifier if verifier is not None else self.make_verifier(answer_key=answer_key)
        self.prompt_key, self.answer_key, self.max_turns = prompt_key, answer_key, max_turns

    @classmethod
    def make_verifier(cls, **kwargs):
        return None

    @classmethod
    def check_flags(cls, args, bad) -> None:
        """Refuse this env's own flags when they are bad, with `bad(message)` (which raises); nothing here."""

    @classmethod
    def settings_from_args(cls, args) -> dict:
        """This env's own settings from the run's parsed flags: keywords for its constructor and for `dataset`
        ({} here). An env with flags of its own (AppWorld's --appworld_*) returns them, so that settings reach every
        env a run makes as arguments, never through os.environ."""
        return {}

    def reset(self, sample: dict) -> list:
        raise NotImplementedError

    def step(self, model_text: str) -> StepResult:
        raise NotImplementedError

    def score_turn(self, model_text: str) -> float:
        """The score `model_text` would get at the current turn, without advancing the episode (used for
        TCPO's fixed-history counterfactuals). Envs whose score depends on hidden state may not support it."""
        raise NotImplementedError(f"{type(self).__name__} cannot score an alternative turn")

    def score_turn_at(self, turn: int, model_text: str):
        """The score `model_text` would have got as turn `turn` (0-based) of the episode just played, without
        changing the episode (TCPO's fixed-history counterfactuals). Here score_turn: an env whose score does not
        depend on the world the earlier turns left (verify-and-refine envs). A stateful env (AppWorld) restores the
        state saved before that turn instead, or returns None when it cannot (that turn gets no counterfactual)."""
        return self.score_turn(model_text)

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        """Rows of an env that generates its own data (arith); None for data-backed envs (math)."""
        return None

    @classmethod
    def data_keys(cls, prompt_key: str, answer_key: str) -> tuple:
        """The fields every --data_path row must have, checked when the data is loaded (the first, if any, must be
        a non-empty prompt). An env that reads other fields returns those; () checks nothing."""
        return (prompt_key, answer_key)

    @classmethod
    def check_row(cls, location: str, row: dict) -> dict:
        """A --data_path row, checked beyond its keys when the data is loaded: the row (or one to use in its place),
        or ValueError saying what is wrong, which the loader reports at `location` (file and line). As is here; the
        code env checks that a row reads as a task of a layout it knows."""
        return row

    def sft_target(self, row: dict) -> str:
        """The assistant reply a supervised warm start teaches for `row` (sft.py; scripts/warm_start.sh): a reply
        the env's own verifier accepts, in the layout its prompt asks for. An env that can say what a right answer
        looks like overrides this; the others cannot be warm-started from their rows."""
        raise NotImplementedError(f"{type(self).__name__} does not say how its rows become supervised targets "
                                  f"(Env.sft_target); give sft.py conversational or prompt-completion rows instead")

    def sft_messages(self, row: dict) -> tuple:
        """(prompt messages, [the assistant's reply]) for supervised fine-tuning: the chat `reset(row)` opens an
        episode with, so the warm start sees exactly the prompts RL will, and `sft_target(row)` as the reply."""
        return self.reset(row), [{"role": "assistant", "content": self.sft_target(row)}]

    def episode_record(self) -> dict:
        """What eval.py keeps of a finished episode besides its turn scores ({} for most envs; AppWorld: the task
        id, its difficulty and the checks passed)."""
        return {}

    @classmethod
    def eval_metrics(cls, records: list) -> dict:
        """Env-specific eval metrics over the episode records of a whole evaluation (AppWorld: TGC, SGC)."""
        return {}


class VerifyAndRefineEnv(Env):
    """Ask; score each answer with the verifier; say whether it is right and ask again while the episode lasts.

    `episode_end` (--episode_end): "success" ends the episode at the first full-marks turn; "max_turns" plays every
    turn (TCPO's and MT-GRPO's protocol), a correct turn getting SOLVED_FEEDBACK, so that a later turn can keep the
    solution or break it. The feedback never contains the answer. Subclasses give `first_message(sample)` and a
    verifier fn(prompt, completion, sample) -> score in [0, 1]; they may override `retry_feedback` (what a turn
    short of full marks is told) and `verdict` (its score and that detail).
    """
    supports_episode_end = True
    solved_feedback = SOLVED_FEEDBACK

    def __init__(self, episode_end: str = "success", **kwargs):
        super().__init__(**kwargs)
        if episode_end not in EPISODE_ENDS:
            raise ValueError(f"episode_end must be one of {EPISODE_ENDS}, got {episode_end!r}")
        self.episode_end = episode_end

    def first_message(self, sample: dict) -> str:
        raise NotImplementedError

    def reset(self, sample: dict) -> list:
        self.sample, self.turn = sample, 0
        return [{"role": "user", "content": self.first_message(sample)}]

    def score_turn(self, model_text: str) -> float:
        return float(self.verifier(None, model_text, self.sample))

    def verdict(self, model_text: str) -> tuple:
        """(score, detail for the feedback or None)."""
        return self.score_turn(model_text), None

    def retry_feedback(self, score: float, detail) -> str:
        return RETRY_FEEDBACK

    def step(self, model_text: str) -> StepResult:
        score, detail = self.verdict(model_text)
        self.turn += 1
        solved = score >= SUCCESS_THRESHOLD
        done = self.turn >= self.max_turns or (solved and self.episode_end == "success")
        feedback = self.solved_feedback if solved else self.retry_feedback(score, detail)
        observation = [] if done else [{"role": "user", "content": feedback}]
        return StepResult(observation=observation, score=score, components={"correctness": score}, done=done,
                          info={"turn": self.turn})


def register_env(name: str):
    def wrap(cls):
        ENVS[name] = cls
        return cls
    return wrap


def env_class(name: str):
    """A registered env by name, or a user's Env subclass by dotted path `package.module:ClassName`."""
    if name in ENVS:
        return ENVS[name]
    if ":" in name:
        cls = load_dotted(name, "--env")
        if not (isinstance(cls, type) and issubclass(cls, Env)):
            raise KeyError(f"--env {name!r} is not a subclass of envs.base.Env")
        return cls
    raise KeyError(f"--env {name!r} is not an environment; choose from {sorted(ENVS)} or give module:Class")


def resolve_env_defaults(args, cls, eval_data_flag: str = None, fallback_max_prompt_seq_len: int = 256) -> None:
    """Fill the flags left unset (None) from the env's declared defaults: --max_answer_seq_len, --max_prompt_seq_len
    (the entry point's `fallback_max_prompt_seq_len` when the env declares none: train.py's 256, DeepSpeed-Chat's
    default; eval.py's 1024), --prompt_key, --answer_key and, when `eval_data_flag` names one (eval.py's data_path,
    train.py's eval_data_path), the env's held-out set. An explicit flag always wins."""
    prompt_len = cls.default_max_prompt_seq_len or fallback_max_prompt_seq_len
    for flag, default in (("max_answer_seq_len", cls.default_max_answer_seq_len), ("max_prompt_seq_len", prompt_len),
                          ("prompt_key", cls.default_prompt_key), ("answer_key", cls.default_answer_key)):
        if getattr(args, flag, None) is None:
            setattr(args, flag, default)
    if eval_data_flag and getattr(args, eval_data_flag, None) is None and cls.default_eval_data is not None:
        setattr(args, eval_data_flag, os.path.join(REPO_ROOT, cls.default_eval_data))


def env_class_from_flags(args, bad):
    """--env's class, its own flags checked (Env.check_flags). `bad(message)` refuses the flags (it raises)."""
    try:
        cls = env_class(args.env)
    except KeyError as exc:
        bad(exc.args[0])
    cls.check_flags(args, bad)
    return cls


def make_env(name: str, **kwargs) -> Env:
    return env_class(name)(**kwargs)
