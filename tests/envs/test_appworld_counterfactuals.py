"""TCPO's counterfactual alternatives on AppWorld: a turn re-played from the world and the shell saved before it
(AppWorldEnv.score_turn_at) scores as a fresh episode replaying the same history scores it, and the episode itself is
left as it was. The launch that gets counterfactuals out of a TCPO run is in test_appworld_train.py."""

from envs import make_env
from envs.appworld.lite.tasks import PRELUDE, load_task
from tests.envs.test_appworld_http import server_url  # noqa: F401 (the same fixture: a server in a thread)

TASK = "messages_text_relationship_1"  # 4 checks: the seed passes 3 (nobody texted yet), the solution passes all
SOLUTION = load_task(TASK).solution[1]  # needs `tokens` and `all_pages` from the PRELUDE cell, and completes the task
# texts a contact who should not get one and clobbers the shell's tokens: a later cell sees both
WRONG = ('c = apis.messages.show_contacts(access_token=tokens["messages"], page_index=0, page_limit=1)[0]\n'
         'apis.messages.send_message(access_token=tokens["messages"], phone_number=c["phone_number"], content="oops")\n'
         'tokens = {}')


def fenced(code: str) -> str:
    return f"I will run:\n```python\n{code}\n```"


def replayed_score(history: list, alternative: str, max_turns: int) -> float:
    """The score `alternative` gets as the next turn of a fresh episode that first plays `history`."""
    env = make_env("appworld", max_turns=max_turns)
    env.reset({"id": TASK})
    for text in history:
        assert not env.step(text).done
    score = env.step(alternative).score
    env.close()
    return score


def test_an_alternative_from_the_saved_state_scores_as_a_fresh_replay_of_its_history():
    history = [fenced(PRELUDE), fenced(WRONG)]
    env = make_env("appworld", max_turns=2)
    env.reset({"id": TASK})
    played = [env.step(text) for text in history]
    assert [r.score for r in played] == [0.75, 0.5] and played[-1].done  # the episode has ended, its world closed
    got = {(k, name): env.score_turn_at(k, text)
           for k in (0, 1) for name, text in (("solution", fenced(SOLUTION)), ("no code", "I am not sure."))}
    want = {(k, name): replayed_score(history[:k], text, 2)
            for k in (0, 1) for name, text in (("solution", fenced(SOLUTION)), ("no code", "I am not sure."))}
    assert got == want
    # before turn 1 the shell has its tokens and no wrong text was sent: the solution passes every check there
    # (from the world as the episode left it it would score 0.5; with the world restored but not the shell, as
    # AppWorld's own load_state does, 0.75); before turn 0 `tokens` is undefined and the cell changes nothing
    assert want == {(0, "solution"): 0.75, (0, "no code"): 0.75, (1, "solution"): 1.0, (1, "no code"): 0.75}
    assert env.score_turn_at(2, fenced(SOLUTION)) is None  # no turn 2 was played
    assert env.score_turn(fenced(SOLUTION)) is None  # nor is there a next turn once the episode has ended


def test_scoring_alternatives_leaves_the_live_episode_and_its_saved_states_as_they_were():
    env = make_env("appworld", max_turns=3)
    env.reset({"id": TASK})
    assert env.step(fenced(PRELUDE)).score == 0.75
    session = env.lite.sessions[TASK]
    before = (session.db, dict(session.variables), list(session.definitions), session.completed,
              dict(session.evaluation))
    saved = (env.states[0].db, dict(env.states[0].variables), env.states[0].evaluation)
    assert env.score_turn(fenced(SOLUTION)) == 1.0  # as turn 1: the alternative completes the task in its copy
    assert env.score_turn_at(0, fenced(SOLUTION)) == 0.75
    assert (session.db, session.variables, session.definitions, session.completed, session.evaluation) == before
    assert (env.states[0].db, env.states[0].variables, env.states[0].evaluation) == saved
    assert env.states[0].db == load_task(TASK).db
    turn = env.step("Let me think first.")  # had an alternative leaked, the task would be complete and this done
    assert (turn.score, turn.done) == (0.75, False)
    assert env.step(fenced(SOLUTION)).score == 1.0  # the live shell still has the tokens turn 0 made


def test_the_remote_backend_gives_no_alternative_scores(server_url):
    """AppWorld's server cannot restore a turn's shell, and credo gives an episode's server back when it ends
    (docs/appworld.md): remote turns get no counterfactual, and no error is counted."""
    env = make_env("appworld", max_turns=2, backend="remote", url=server_url)
    env.reset({"id": TASK})
    env.step(fenced(PRELUDE))
    assert env.score_turn_at(0, fenced(SOLUTION)) is None and env.score_turn(fenced(SOLUTION)) is None
    env.close()
