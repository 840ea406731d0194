import pytest

from rl.config import build_parser, parse_args

FOUNDATION_FLAGS = """--algo --env --model_name_or_path --data_path --prompt_key --answer_key --num_generations
--per_device_generation_batch_size --max_prompt_seq_len --max_answer_seq_len --temperature --top_p --top_k
--actor_learning_rate --actor_weight_decay --lr_scheduler_type --num_warmup_steps --max_steps --ppo_epochs
--gradient_clipping --seed --actor_zero_stage --offload --dtype --enable_hybrid_engine --beta --kl_type
--clip_ratio_low --clip_ratio_high --clip_ratio_c --loss_agg_mode --scale_rewards --output_dir --save_steps
--enable_tensorboard --tensorboard_path --enable_test_mode --test_stop_step""".split()


def test_help_all_lists_every_flag_with_its_default(capsys, monkeypatch):
    import train
    monkeypatch.setenv("COLUMNS", "80")  # argparse's width when its output is a pipe, whatever this terminal is
    with pytest.raises(SystemExit) as exc:  # train.py's main, in this process: --help exits before the heavy imports
        train.main(["--help-all"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in FOUNDATION_FLAGS:
        assert flag in out, flag
    assert "(default: grpo)" in out and "(default: 3)" in out


def _refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    return str(exc.value) + capsys.readouterr().err


@pytest.mark.parametrize("argv,fragment", [
    (["--maestro_rewards", "fmt,vibes"], "unknown reward(s) vibes"),
    (["--maestro_rewards", "fmt,fmt"], "lists a reward twice"),
    (["--maestro_rewards", "fmt,pref"], "at least two rewards"),
    (["--max_turns", "2"], "--max_turns 1"),
    (["--reward_funcs", "correctness,length"], "drop --reward_funcs"),
    (["--maestro_emphasis", "1.5"], "--maestro_emphasis"),
    (["--len_min", "50", "--len_max", "20"], "--len_min 50"),
    (["--reward_model_name_or_path", "./no/such/rm"], "does not exist"),
])
def test_bad_maestro_flags_are_refused(argv, fragment, tiny_model_dir, capsys):
    msg = _refused(["--algo", "maestro", "--env", "mixed", "--model_name_or_path", tiny_model_dir, *argv], capsys)
    assert fragment in msg


@pytest.mark.parametrize("argv,fragment", [
    (["--num_generations", "1"], "--num_generations 1"),
    (["--per_device_train_micro_batch_size", "3"], "must divide"),
    (["--decode_loop", "beam"], "--decode_loop: invalid choice"),
    (["--temperature", "0"], "--temperature"),
    (["--clip_ratio_c", "0.5"], "--clip_ratio_c"),
    (["--data_path", "/nonexistent/train.jsonl"], "does not exist"),
    (["--env", "chess"], "not an environment"),
    (["--env", "math"], "--data_path"),
    (["--model_name_or_path", "/no/such/model"], "/no/such/model does not exist"),
])
def test_bad_flags_are_refused_at_parse_time(argv, fragment, tiny_model_dir, capsys):
    if "--model_name_or_path" not in argv:
        argv = argv + ["--model_name_or_path", tiny_model_dir]
    assert fragment in _refused(argv, capsys)


def test_defaults_fill_the_micro_batch_and_tensorboard_path(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--output_dir", "o"])
    assert args.per_device_generation_batch_size * args.num_generations == 32
    assert args.per_device_train_micro_batch_size == 8  # the largest divisor of 32 up to 8
    odd = parse_args(["--model_name_or_path", tiny_model_dir, "--output_dir", "o",
                      "--per_device_generation_batch_size", "3", "--num_generations", "2"])
    assert odd.per_device_train_micro_batch_size == 6
    seven = parse_args(["--model_name_or_path", tiny_model_dir, "--output_dir", "o",
                        "--per_device_generation_batch_size", "7", "--num_generations", "2"])
    assert seven.per_device_train_micro_batch_size == 7
    assert args.tensorboard_path == "o/tensorboard"
    # unset, --actor_zero_stage resolves by world size (rl/engine/zero_config.py): 0 in one process, as DeepSpeed-Chat's
    # single_gpu scripts
    assert build_parser().get_default("actor_zero_stage") is None
    assert args.actor_zero_stage == 0


def test_fp16_on_cpu_and_bad_resume_paths_are_refused(tiny_model_dir, capsys):
    base = ["--model_name_or_path", tiny_model_dir]
    assert "--dtype fp16 needs CUDA" in _refused(base + ["--dtype", "fp16"], capsys)
    assert "--resume /no/ckpt does not exist" in _refused(base + ["--resume", "/no/ckpt"], capsys)
    assert "--max_reward_error_rate" in _refused(base + ["--max_reward_error_rate", "2"], capsys)


def test_bad_training_data_stops_before_training_naming_file_and_line(tiny_model_dir, tmp_path):
    # train.py's main in this process, in a one-rank process group as `python train.py` makes: the data is read
    # before any model is built, so no launch is needed to see the refusal
    import train
    from tests.helpers import one_rank_process_group
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"\n')
    with one_rank_process_group(), pytest.raises(SystemExit) as exc:
        train.main(["--model_name_or_path", tiny_model_dir, "--env", "math", "--data_path", str(data),
                    "--output_dir", str(tmp_path / "out"), "--dtype", "fp32"])
    assert isinstance(exc.value.code, str)  # sys.exit(message): printed to stderr, exit status 1
    assert exc.value.code.startswith("train.py: error: bad training data: ")
    assert f"{data}:2: malformed JSON" in exc.value.code
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_skip_bad_rows_reports_how_many_were_skipped(tmp_path, caplog):
    from rl.rollout.data import load_jsonl_rows
    data = tmp_path / "train.jsonl"
    data.write_bytes(b'{"problem": "1+1", "answer": "2"}\n{"problem": ""}\n\xff\n{"problem": "3", "answer": "3"}\n')
    rows = load_jsonl_rows(str(data), ("problem", "answer"), skip_bad_rows=True)
    assert [r["answer"] for r in rows] == ["2", "3"]
    assert "skipped 2 bad row(s)" in caplog.text


@pytest.mark.parametrize("argv,fragment", [
    (["--algo", "dara"], "--algo dara normalises each reward separately and needs at least two rewards"),
    (["--algo", "gdpo", "--reward_funcs", "correctness"], "needs at least two rewards"),
    (["--reward_funcs", "correctness,lenght"], "unknown reward 'lenght'"),
    (["--algo", "tcpo"], "--algo tcpo assigns credit to turns and needs --max_turns >= 2 (got 1)"),
    (["--algo", "mt_grpo", "--max_turns", "1"], "needs --max_turns >= 2"),
    (["--max_turns", "3", "--reward_funcs", "correctness,length"], "scored by the env's verifier only"),
    (["--reward_funcs", "correctness,correctness"], "lists a reward twice"),
    (["--reward_weights", "1,x"], "--reward_weights 1,x: expected comma-separated numbers"),
    (["--algo", "dara", "--reward_funcs", "correctness,length", "--dara_w_max", "0.5"], "--dara_w_max"),
])
def test_bad_reward_flags_are_refused(argv, fragment, tiny_model_dir, capsys):
    assert fragment in _refused(argv + ["--model_name_or_path", tiny_model_dir], capsys)


def test_appworld_flags_reach_every_env_the_run_makes(tiny_model_dir, monkeypatch):
    from envs.appworld.env import AppWorldEnv
    for name in ("BACKEND", "URL", "SCORE"):
        monkeypatch.delenv(f"CREDO_APPWORLD_{name}", raising=False)
    args = parse_args(["--env", "appworld", "--appworld_score", "success", "--appworld_backend", "lite",
                       "--appworld_url", "http://127.0.0.1:9", "--model_name_or_path", tiny_model_dir])
    from rl.scoring import Scorer, ScoringSettings
    env = Scorer(ScoringSettings.from_args(args)).new_env()
    assert isinstance(env, AppWorldEnv)
    assert (env.backend, env.urls, env.score_mode) == ("lite", "http://127.0.0.1:9", "success")
