"""What `--help` tells a new user, and flags that argparse must not guess."""
import pytest

import eval as eval_cli
from envs import ENVS
from rl.config import build_parser, parse_args


def _action(parser, flag):
    return next(a for a in parser._actions if flag in a.option_strings)


def test_train_help_for_env_names_every_registered_env_and_module_class():
    text = _action(build_parser(), "--env").help
    for name in sorted(ENVS):
        assert name in text, name
    assert "module:Class" in text


def test_help_shows_the_common_flags_and_help_all_every_flag(capsys, monkeypatch):
    """TRL's and verl's users read a few dozen flags: --help shows the common ones, --help-all the rest (#65 item 9)."""
    import train
    from rl.config import COMMON_FLAGS
    monkeypatch.setenv("COLUMNS", "120")
    texts = {}
    for flag in ("--help", "--help-all"):
        with pytest.raises(SystemExit) as exc:
            train.main([flag])
        assert exc.value.code == 0
        texts[flag] = capsys.readouterr().out
    short, full = texts["--help"], texts["--help-all"]
    every = {o for a in build_parser()._actions for o in a.option_strings if o.startswith("--")}
    assert all(flag in short for flag in COMMON_FLAGS) and all(flag in full for flag in every)
    assert "--tcpo_tau" not in short and "--lora_r" not in short and "--vllm_is_cap" not in short
    hidden = [a for a in build_parser()._actions if a.option_strings and not set(a.option_strings) & COMMON_FLAGS
              and "--help" not in a.option_strings and "--help-all" not in a.option_strings]
    assert f"{len(hidden)} more flags" in short and "`train.py --help-all` lists every flag" in short
    assert len(short.splitlines()) < len(full.splitlines()) / 3 and short.count("(default: ") == len(
        [line for line in short.splitlines() if "(default: " in line])  # each default once


def test_eval_help_shows_the_default_of_every_flag_that_has_one():
    # a flag whose default is None (unset) or a plain off switch shows none: "(default: None)" was noise
    parser = eval_cli.build_parser()
    formatter = parser.formatter_class(prog="eval.py")
    missing = [a.option_strings[0] for a in parser._actions
               if a.option_strings and a.dest != "help" and a.default is not None and a.default is not False
               and "default" not in (formatter._get_help_string(a) or "")]
    assert missing == []
    assert "(default: 200)" in parser.format_help()  # --limit
    assert "(default: None)" not in parser.format_help()


@pytest.mark.parametrize("build,argv", [(build_parser, ["--max_step", "3"]),
                                        (eval_cli.build_parser, ["--limi", "3"]),
                                        (eval_cli.build_parser, ["--temp", "0.5"])])
def test_an_abbreviated_flag_is_refused_not_guessed(build, argv, capsys):
    with pytest.raises(SystemExit):
        build().parse_args(argv)
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("name,fragment", [("rows.txt", "unknown data format '.txt'; supported: .jsonl"),
                                           ("missing.parquet", "missing.parquet does not exist")])
def test_a_data_path_that_cannot_be_read_is_refused_at_parse_time(tmp_path, name, fragment):
    path = tmp_path / name
    if name.endswith(".txt"):
        path.write_text("1+1\n")
    with pytest.raises(SystemExit) as exc:
        parse_args(["--env", "math", "--data_path", str(path)])
    assert "--data_path" in str(exc.value) and fragment in str(exc.value)


def test_each_file_of_a_comma_list_is_checked(tmp_path):
    good = tmp_path / "a.jsonl"
    good.write_text('{"problem": "1+1", "answer": "2"}\n')
    with pytest.raises(SystemExit) as exc:
        parse_args(["--env", "math", "--data_path", f"{good},{tmp_path / 'b.csv'}"])
    assert str(exc.value) == f"train.py: error: --data_path: {tmp_path / 'b.csv'} does not exist"


def test_eval_refuses_a_bad_row_with_its_file_and_line(tmp_path, tiny_model_dir):
    path = tmp_path / "test.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n{"question": "2+2"}\n')
    args = eval_cli.build_parser().parse_args(["--model_name_or_path", tiny_model_dir, "--env", "math",
                                               "--data_path", str(path)])
    eval_cli.validate(args)
    with pytest.raises(SystemExit) as exc:
        eval_cli.eval_rows(args)
    assert str(exc.value).startswith(f"eval.py: error: bad eval data: {path}:2: missing key 'problem'")
