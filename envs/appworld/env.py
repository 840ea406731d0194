"""`--env appworld`: the model drives stateful apps by writing Python, one fenced cell per turn.

reset renders the task (instruction, the supervisor it acts for, the apps, how to discover APIs and finish);
step runs the reply's ```python block in the task's persistent shell and answers with the (truncated) output and a
one-line reminder of the task. The episode ends when the model calls apis.supervisor.complete_task(...) or at
--max_turns. The score of a turn is the fraction of the task's checks that pass in the world as it then is
(AppWorld's pass_count / num_tests), or 1/0 for full success with --appworld_score success.

Settings are constructor arguments (and `dataset`'s), filled from train.py / eval.py's --appworld_* flags by
`settings_from_args` (envs/appworld/flags.py; the CREDO_APPWORLD_* variables are those flags' defaults):
    backend     lite (default: the offline stand-in, in process) or remote (HTTP)
    url         remote servers, comma-separated (one episode per server at a time); default http://127.0.0.1:8000
    score       fraction (default) or success
    eval_split  the split eval.py's "eval" means (default: test for lite, test_normal for remote)
    tasks_dir   remote only: a folder with <split>.txt task-id lists (AppWorld's data/datasets)
"""
import os

from envs.appworld.flags import BACKENDS, DEFAULT_URL, SCORES, appworld_settings, check_appworld_flags
from envs.appworld.metrics import appworld_metrics, pass_rate
from envs.base import Env, StepResult, register_env
from envs.code_env import extract_code

NO_CODE = "No ```python code block was found in your reply. Write the code to run in one ```python block."
GUIDE = """How to work:
- Each reply runs one ```python code block in a persistent Python shell (variables persist between replies); you
  see what it prints.
- Call APIs as apis.<app>.<api>(name=value, ...). List an app's APIs with
  apis.api_docs.show_api_descriptions(app_name=...) and read one with apis.api_docs.show_api_doc(app_name=..., api_name=...).
- Log in with apis.<app>.login(username=..., password=...); the passwords are in
  apis.supervisor.show_account_passwords(). Pass the access_token you get to that app's other APIs.
- Lists are paginated: page_index (from 0) and page_limit.
- When the task is done, call apis.supervisor.complete_task(answer=...) with the answer if the task asks a
  question, else apis.supervisor.complete_task()."""


@register_env("appworld")
class AppWorldEnv(Env):
    default_max_answer_seq_len = 512  # a cell of code per turn (credo's reading; the docs' recipes use it)
    step_retryable = False  # a cell may have changed the world before a later call failed: never run it twice
    max_output_chars = 2000
    experiment_name = "credo"

    def __init__(self, verifier=None, prompt_key: str = "problem", answer_key: str = "answer", max_turns: int = 1,
                 backend: str = "lite", url: str = DEFAULT_URL, score: str = "fraction", **unused):
        super().__init__(verifier=verifier, prompt_key=prompt_key, answer_key=answer_key, max_turns=max_turns)
        self.backend, self.urls, self.score_mode = backend, url, score
        if self.backend not in BACKENDS or self.score_mode not in SCORES:
            raise ValueError(f"AppWorld backend must be lite or remote (got {self.backend!r}) and "
                             f"score fraction or success (got {self.score_mode!r})")
        self.client, self.lease, self.task_id, self.result = None, None, None, None
        self.lite, self.states = None, []  # the lite backend and its saved state before each turn (score_turn_at)

    # ---- episode lifecycle ----------------------------------------------------------------------------------------
    def _open(self):
        if self.backend == "lite":
            from envs.appworld.lite.backend import LiteBackend
            self.client = self.lite = self.lite or LiteBackend()  # kept after close: the saved states need it
        else:
            from envs.appworld.client import RemoteClient, server_pool
            self.lease = server_pool(self.urls).acquire()
            self.client = RemoteClient(self.lease)

    def close(self):
        """End the episode on the server and give the server back (safe to call twice)."""
        client, lease, self.client, self.lease = self.client, self.lease, None, None
        try:
            if client is not None and self.task_id is not None:
                client.close(self.task_id)
        finally:
            if lease is not None:
                from envs.appworld.client import server_pool
                server_pool(self.urls).release(lease)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead server: nothing left to do
            pass

    def reset(self, sample: dict) -> list:
        self.close()
        self.task_id = str(sample.get("task_id") or sample["id"])
        self.turn, self.result, self.states = 0, None, []
        self._open()
        try:
            task = self.client.initialize(self.task_id, self.experiment_name)
            self.instruction = task.get("instruction") or sample.get(self.prompt_key, "")
            self.difficulty = task.get("difficulty", sample.get("difficulty"))
            apps = task.get("app_descriptions")
            if apps is None:  # AppWorld's server does not send them with the task: ask its api_docs app
                apps = self.client.execute(self.task_id, "print(apis.api_docs.show_app_descriptions())")
        except BaseException:
            self.close()
            raise
        return [{"role": "user", "content": self.render(self.instruction, task.get("supervisor") or {}, apps)}]

    @staticmethod
    def render(instruction: str, who: dict, apps) -> str:
        name = " ".join(filter(None, (who.get("first_name"), who.get("last_name")))) or "your supervisor"
        contact = ", ".join(f"{k.replace('_', ' ')} {who[k]}" for k in ("email", "phone_number") if who.get(k))
        app_lines = "\n".join(f"- {a['name']}: {a['description']}" for a in apps) if isinstance(apps, list) else apps
        return (f"You are an AI assistant acting for {name}{f' ({contact})' if contact else ''} in a world of apps "
                f"that you operate by writing Python code.\n\nTask: {instruction}\n\nApps:\n{app_lines}\n\n{GUIDE}")

    def step(self, model_text: str) -> StepResult:
        try:
            return self._step(model_text)
        except BaseException:
            self.close()
            raise

    def _step(self, model_text: str) -> StepResult:
        code = self.code_of(model_text)
        if self.backend == "lite":  # the world and the shell before this turn, for its counterfactual alternatives
            self.states.append(self.client.save_state(self.task_id))
        output = NO_CODE if code is None else self.client.execute(self.task_id, code)
        self.turn += 1
        completed = self.client.task_completed(self.task_id)
        done = completed or self.turn >= self.max_turns
        self.result = self.client.evaluate(self.task_id)
        score = self.score(self.result)
        info = {"turn": self.turn, "task_id": self.task_id, "completed": completed, **self.episode_record()}
        if done:
            self.close()
            return StepResult(observation=[], score=score, components={"correctness": score}, done=True, info=info)
        feedback = f"{self.truncate(output)}\n\nReminder of the task: {self.instruction}"
        return StepResult(observation=[{"role": "user", "content": feedback}], score=score,
                          components={"correctness": score}, done=False, info=info)

    def code_of(self, model_text: str):
        """The cell a reply runs: its last ```python block, or None."""
        return extract_code(model_text)

    def score(self, result: dict) -> float:
        if self.score_mode == "success":
            return float(bool(result["success"]))
        return pass_rate(result)

    def truncate(self, text: str) -> str:
        if len(text) <= self.max_output_chars:
            return text
        return text[:self.max_output_chars] + f"\n... [{len(text) - self.max_output_chars} more characters cut]"

    def score_turn(self, model_text: str):
        """The score `model_text` would get as the next turn of the live episode (None once it has ended)."""
        return self.score_turn_at(self.turn, model_text)

    def score_turn_at(self, turn: int, model_text: str):
        """The score `model_text` would have got as turn `turn` (0-based) of the episode played: its cell runs in a
        throw-away copy of the world and the shell as they were before that turn (saved by step), and the copy is
        judged as step judges a turn; the episode itself is untouched, ended or not (TCPO's fixed-history
        counterfactuals, rl/methods/tcpo_counterfactuals.py).

        None on the remote backend (TCPO's counterfactuals skip those turns): AppWorld's server can save and load a
        task's databases (save_state / load_state) but not its shell's variables, and only while the task's world is
        still open on the server that played it, while credo closes an episode's world and hands its server back when
        the episode ends (docs/appworld.md)."""
        if self.lite is None or not 0 <= turn <= len(self.states):
            return None
        if turn < len(self.states):
            state = self.states[turn]
        elif self.client is not None:  # the live episode's next turn: its state now
            state = self.lite.save_state(self.task_id)
        else:
            return None
        return self.score(self.lite.try_cell(state, self.code_of(model_text)))

    # ---- data and metrics -----------------------------------------------------------------------------------------
    def episode_record(self) -> dict:
        """The last evaluation of this episode, as eval.py's AppWorld metrics want it."""
        r = self.result or {"success": False, "pass_count": 0, "num_tests": 0}
        return {"task_id": self.task_id, "difficulty": r.get("difficulty", getattr(self, "difficulty", None)),
                "success": bool(r["success"]), "pass_count": r["pass_count"], "num_tests": r["num_tests"]}

    @classmethod
    def eval_metrics(cls, records: list) -> dict:
        return appworld_metrics([r for r in records if r.get("task_id")])

    @classmethod
    def check_flags(cls, args, bad) -> None:
        check_appworld_flags(args, bad)

    @classmethod
    def settings_from_args(cls, args) -> dict:
        return appworld_settings(args)

    @classmethod
    def dataset(cls, split: str, n: int, seed: int, backend: str = "lite", eval_split: str = None,
                tasks_dir: str = None, **unused):
        """Task rows {"id", "problem", "answer", "difficulty"} of a split; "eval" means the test split."""
        remote = backend == "remote"
        if split == "eval":
            split = eval_split or ("test_normal" if remote else "test")
        if remote:
            if not tasks_dir:
                return None  # pass --data_path rows with a task_id (or id) field
            with open(os.path.join(tasks_dir, f"{split}.txt")) as f:
                ids = [line.strip() for line in f if line.strip()]
            rows = [{"id": t, "problem": t, "answer": ""} for t in ids]
        else:
            from envs.appworld.lite.tasks import SPLITS, load_task, task_ids
            if split not in SPLITS:
                raise ValueError(f"lite AppWorld splits are {SPLITS} (and eval = test), got {split!r}")
            rows = [{"id": t, "problem": load_task(t).instruction, "answer": "", "difficulty": load_task(t).difficulty}
                    for t in task_ids(split)]
        return rows[:n]
