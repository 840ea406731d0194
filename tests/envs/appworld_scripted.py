"""An AppWorld lite env with a scripted coder, for launches with a tiny random model (`--env
tests.envs.appworld_scripted:ScriptedAppWorldEnv`).

A random model cannot write Python, so every reply of it runs nothing and every counterfactual alternative scores the
same (no information, no counterfactual). Here a reply's text picks its cell instead: an even crc32 runs the task's
whole reference solution, an odd one runs nothing. Different replies then change the world differently, and
everything after that choice is the real env: the saved states, the sandboxed cell, the judging.
"""
import zlib

from envs.appworld.env import AppWorldEnv
from envs.appworld.lite.tasks import load_task


class ScriptedAppWorldEnv(AppWorldEnv):
    def code_of(self, model_text: str):
        if zlib.crc32(model_text.encode()) % 2:
            return None
        return "\n".join(load_task(self.task_id).solution)
