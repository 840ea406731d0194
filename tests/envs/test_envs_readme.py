"""envs/README.md's example env, run as written: the page a new user copies from cannot drift from the code."""
import os
import re
import sys

import pytest
import torch

from tests.helpers import REPO_ROOT, default_args


@pytest.fixture(scope="module")
def reverse_env(tmp_path_factory):
    with open(os.path.join(REPO_ROOT, "envs", "README.md")) as f:
        (code,) = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    folder = tmp_path_factory.mktemp("user_envs")
    (folder / "my_envs.py").write_text(code)
    # the user's own folder on the path, as their PYTHONPATH would put it (pytest undoes it after the module)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        from envs import env_class
        yield env_class("my_envs:ReverseEnv")
    sys.modules.pop("my_envs", None)


def test_readme_env_plays_multi_turn_episodes_and_its_parts_reach_the_metrics(reverse_env, tiny_model_dir):
    from transformers import AutoModelForCausalLM
    from rl.log.step_metrics import env_metrics
    from rl.rollout.episodes import run_episodes
    from rl.engine.models import load_tokenizer
    from rl.rollout.samplers import SamplerSettings, make_sampler
    from rl.scoring import Scorer, ScoringSettings
    args = default_args(env="my_envs:ReverseEnv", answer_key="answer", prompt_key="problem", code_workers=2,
                              reward_funcs=["correctness"], max_turns=2, traj_score="final", reward_weights=None,
                              max_prompt_seq_len=128, max_answer_seq_len=6, temperature=1.0, top_p=1.0, top_k=0)
    scorer = Scorer(ScoringSettings.from_args(args))
    samples = reverse_env.dataset("train", 4, seed=0)
    envs = [scorer.new_env() for _ in samples]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = load_tokenizer(tiny_model_dir)
    batch = run_episodes(make_sampler(SamplerSettings.from_args(args), model, tok), tok, envs, samples, torch.arange(4), scorer.safe_step, args,
                         {})
    assert scorer.verifier.stats.failures == 0
    assert all(len(c) == 4 for c in batch.conversations)  # a random model is wrong: feedback and a second turn
    assert set(env_metrics(batch.env_values)) == {"env/exact/mean", "env/letters/mean", "env/info/turn/mean",
                                                  "env/info/guess_len/mean"}
    assert env_metrics(batch.env_values)["env/info/turn/mean"] == 1.5


def test_readme_env_reads_rows_from_a_csv_with_its_own_keys(reverse_env, tmp_path):
    import pandas as pd
    from rl.rollout.data import load_rows
    path = str(tmp_path / "words.csv")
    pd.DataFrame([{"word": "abc", "answer": "cba"}]).to_csv(path, index=False)
    assert load_rows(path, reverse_env.data_keys("problem", "answer")) == [{"word": "abc", "answer": "cba"}]


def test_readme_is_linked_from_the_main_readme():
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        assert "envs/README.md" in f.read()
