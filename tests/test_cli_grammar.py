"""One command-line grammar for every sub-command, checked by walking the parsers: where the run directory goes,
what a list option is called, what every ``--help`` shows, and that the former spellings still work."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from clusterclip.cli.main import GRAMMAR, build_parser, main
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.plan.config import PlanConfig
from clusterclip.settings import flag_of
from tests.test_cli import make_corpus

CREATE = ("run", "embed", "experiment", "tune")
"""The commands that create a run from INPUT files, as the grammar names them."""


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every sub-command's parser, by name."""
    parser = build_parser()
    return dict(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


COMMANDS = tuple(subcommands())


def visible(action: argparse.Action) -> list[str]:
    """The option strings the help shows (a renamed option's former spellings are hidden)."""
    return [s for s in action.option_strings if s not in getattr(action, "old", ())]


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_the_grammar_is_stated_in_the_top_level_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(GRAMMAR.split()) in out
    assert f"({', '.join(CREATE)})" in out and "--dest DIR" in out


@pytest.mark.parametrize("name", COMMANDS)
def test_the_run_directory_is_positional_except_where_inputs_create_it(name):
    p = subcommands()[name]
    positionals = [a for a in p._actions if not a.option_strings]
    out = option(p, "--out")
    if name in CREATE:
        assert positionals[0].metavar == "INPUT" and positionals[0].nargs == "*"
        assert out is not None and out.metavar == "RUN_DIR" and "--out" in visible(out)
    else:
        assert positionals[0].metavar == "RUN_DIR", f"{name}: RUN_DIR is not the first positional argument"
        assert out is None or "--out" not in visible(out), f"{name}: --out must name a run directory"
    others = [a for a in p._actions if a.option_strings and a is not out]
    assert not [a.option_strings for a in others if a.metavar == "RUN_DIR"], "one spelling of the run directory"


def test_an_option_takes_one_value_or_a_list_in_every_command():
    takes_list: dict[str, dict[str, bool]] = {}
    for name, p in subcommands().items():
        for action in p._actions:
            for flag in visible(action):
                takes_list.setdefault(flag, {})[name] = "comma-separated" in (action.help or "")
    mixed = {flag: by for flag, by in takes_list.items() if len(set(by.values())) > 1}
    assert not mixed, f"one value in some commands, a list in others: {mixed}"
    lists = {flag for flag, by in takes_list.items() if any(by.values())}
    singles = set(takes_list) - lists
    assert {"--strategies", "--max-repeats", "--duplicate-modes", "--seeds"} <= lists
    assert {"--strategy", "--max-repeat", "--duplicates", "--seed"} <= singles


@pytest.mark.parametrize("name", COMMANDS)
def test_every_help_has_examples_wrapped_text_and_no_empty_defaults(name, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    p = subcommands()[name]
    text = p.format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    long = [line for line in text.splitlines() if len(line) > 98]
    assert not long, f"{name} --help has lines wider than the terminal: {long}"
    required = [a for a in p._actions if a.required and a.option_strings]
    assert all("(default:" not in (a.help or "") for a in required)
    _, sep, examples = text.partition("\nexamples:\n")
    assert sep, f"{name} --help has no examples"
    lines = [shlex.split(line, comments=True) for line in examples.strip().splitlines()]
    assert lines[0][:2] == ["clusterclip", name], f"{name} --help's examples start with another command"
    for argv in lines:
        assert argv[0] == "clusterclip" and argv[1] in COMMANDS, argv
        build_parser().parse_args(argv[1:])  # exits on a bad example
        assert "deprecated" not in capsys.readouterr().err, f"{argv}: an example uses a former spelling"


@pytest.mark.parametrize(("argv", "dest", "value", "new"), [
    (["export", "R", "--out", "d"], "dest", "d", "--dest"),
    (["run", "--strategy", "random,uniform"], "strategies", "random,uniform", "--strategies"),
    (["experiment", "--out", "R", "--max-repeat", "4,9"], "max_repeats", (4, 9), "--max-repeats"),
    (["experiment", "--out", "R", "--duplicates", "none,drop"], "duplicate_modes", ("none", "drop"),
     "--duplicate-modes"),
    (["embed", "--out", "R", "--shard-size", "10"], "embed_shard_size", 10, "--embed-shard-size"),
    (["run", "--shard-size", "10"], "embed_shard_size", 10, "--embed-shard-size"),
])
def test_former_spellings_still_parse_and_say_they_are_deprecated(argv, dest, value, new, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err.splitlines()
    assert err == [f"clusterclip: note: `clusterclip {argv[0]} {argv[-2]}` is deprecated; use {new}"]
    renamed = build_parser().parse_args([*argv[:-2], new, argv[-1]])
    assert getattr(renamed, dest) == value and not capsys.readouterr().err


def test_former_spellings_run_end_to_end(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 30, "astronomy": 20, "finance": 10})
    run = str(tmp_path / "run")
    assert main(["run", str(corpus), "--out", run, "--embedder", "hashing", "--k", "3",
                 "--strategy", "random", "-q"]) == 0
    assert "deprecated; use --strategies" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "run" / "plans").iterdir()] == ["random-Rinf-tokens-B2epochs-s0"]
    assert main(["export", run, "--format", "jsonl", "--out", str(tmp_path / "x"), "-q"]) == 0
    assert "deprecated; use --dest" in capsys.readouterr().err
    assert (tmp_path / "x" / "export.json").is_file()
    assert main(["export", run, "--format", "jsonl", "--dest", str(tmp_path / "x"), "-q"]) == 0, "the same export"


def test_one_option_name_has_one_meaning_and_one_default():
    """--epochs is the same budget with the same default in run and plan; --shard-size is only export's (rows per
    shard), the embed stage's is --embed-shard-size (embeddings per shard file); --budget-unit defaults to tokens in
    run and to docs in plan, and each command's help says so. (plan leaves the settings a continuation inherits out
    of the namespace unless given: the same declared default, which a continuation replaces by its parent's.)"""
    declared = {flag_of(c, f.name): f.default for c in (PlanConfig, TuneConfig) for f in dataclasses.fields(c)}
    shown: dict[str, set[tuple[object, str]]] = {}
    for p in subcommands().values():
        for action in p._actions:
            for flag in visible(action):
                default = declared.get(flag, action.default) if action.default == argparse.SUPPRESS else action.default
                shown.setdefault(flag, set()).add((default, action.help or ""))
    for flag in ("--epochs", "--budget", "--shard-size", "--embed-shard-size", "--max-repeat", "--predictor",
                 "--swarm-predictor"):
        assert len(shown[flag]) == 1, f"{flag} differs between commands: {shown[flag]}"
    # tune's weight search draws afresh unless told to fit; --from-csv always fits, its own option says with what
    assert [d for d, _ in shown["--predictor"]] == ["none"] and [d for d, _ in shown["--swarm-predictor"]] == [
        "loglinear"]
    assert "--from-csv" not in next(iter(shown["--predictor"]))[1]
    # the one deliberate difference, said where each is shown: run compares its strategies at equal tokens
    units = {default: text for default, text in shown["--budget-unit"]}
    assert sorted(units) == ["docs", "tokens"], units
    assert "`clusterclip run`'s is tokens" in units["docs"] and "`clusterclip plan`'s is docs" in units["tokens"]
    (epochs,) = shown["--epochs"]
    assert "(default: 2," in epochs[1] and "one epoch" not in next(iter(shown["--budget"]))[1]
    assert [n for n, p in subcommands().items() if option(p, "--shard-size") and "--shard-size" in visible(
        option(p, "--shard-size"))] == ["export"]
    run = build_parser().parse_args(["run"])
    plan = build_parser().parse_args(["plan", "R"])
    from clusterclip.cli.options import plan_configs

    assert plan_configs(run, ["uniform"])[0].epochs == plan_configs(plan, ["uniform"])[0].epochs == 2
    continued = build_parser().parse_args(["plan", "R", "--continue", "P", "--consumed", "5"])
    assert plan_configs(continued, ["uniform"])[0].epochs is None  # what remains of the parent
