"""The ``orleanspy`` commands of README.md and docs/*.md work as written.

Every command the documents show is parsed by the CLI's own parser, in process, with
abbreviated options refused (``--member`` would parse by prefix, but it is not what the
reader should type); every flag a paragraph names beside a command is an option of it. Then
the README's quickstart grain runs in a real silo process started with the README's cluster
command, from a folder whose ``orleanspy.toml`` names the cluster, and the documents'
inspection commands (``call``, ``cluster status``, ``streams ...``, ``grains ...``,
``reminders list``) and finally ``silo stop --all`` run against it as written, in one CLI
process, with the exit codes the documents give.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from silo.cli import build_parser

from .doc_commands import ROOT, DocCommand, doc_commands, flag_mentions
from .silo_process import STOP_TIMEOUT, SiloProcess, child_env, free_port

pytestmark = pytest.mark.integration

COMMANDS = doc_commands()


def _strict_parser() -> argparse.ArgumentParser:
    """The CLI's parser with option abbreviations refused at every level."""
    parser = build_parser()
    stack = [parser]
    while stack:
        current = stack.pop()
        current.allow_abbrev = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    return parser


def _subcommand(argv: tuple[str, ...]) -> tuple[argparse.ArgumentParser, int]:
    """The parser of the subcommand ``argv`` names, and how many words name it."""
    current = _strict_parser()
    used = 0
    while True:
        groups = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not groups or used >= len(argv) or argv[used] not in groups[0].choices:
            return current, used
        current = groups[0].choices[argv[used]]
        used += 1


def _parse_error(argv: tuple[str, ...]) -> str | None:
    """argparse's complaint about ``argv``, or None when it parses."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            _strict_parser().parse_args(list(argv))
        except SystemExit as exc:
            return err.getvalue().strip() or f"exit {exc.code}"
    return None


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_the_documents_show_the_commands_this_test_expects():
    names = {" ".join(_subcommand(argv)[0].prog.split()[1:])
             for c in COMMANDS for argv in c.argvs}
    # a command the documents stop showing, or an extraction that finds nothing, fails here
    assert {"call", "silo start", "silo stop", "cluster status", "streams status",
            "streams subscriptions", "streams unsubscribe", "streams agents", "grains top",
            "grains locate", "grains show", "reminders list", "spark run"} <= names


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.where} {c.text}")
def test_each_documented_command_parses(command: DocCommand):
    for argv in command.argvs:
        parser, used = _subcommand(argv)
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
        assert used >= 1 and leaf, (
            f"{command.where}: {command.text!r} names no orleanspy command ({argv[:used + 1]})")
        if command.inline and used == len(argv):
            continue  # the command's name in prose (`orleanspy call`), not an invocation
        problem = _parse_error(argv)
        assert problem is None, f"{command.where}: `{command.text}` does not parse: {problem}"


def test_each_flag_named_beside_a_command_is_its_option():
    silo_start = _options(_subcommand(("silo", "start"))[0])
    wrong = []
    for where, commands, flag in flag_mentions():
        known = set(silo_start)  # the configuration's flags are named beside any command
        for command in commands:
            for argv in command.argvs:
                known |= _options(_subcommand(argv)[0])
        if flag not in known:
            wrong.append(f"{where}: {flag} beside {[c.text for c in commands]}")
    assert not wrong, "flags that are no option of the commands beside them:\n" + "\n".join(
        wrong)


# -- run for real ----------------------------------------------------------------------------

#: Subcommands run against the silo, and the exit code the documents give for the sample
#: values (an ID the stream does not have: "refused with exit 1").
RUN = {"call": 0, "cluster status": 0, "streams status": 0, "streams subscriptions": 0,
       "streams unsubscribe": 1, "streams agents": 0, "grains locate": 0, "grains top": 0,
       "grains show": 0, "reminders list": 0}

_DRIVER = """\
import contextlib, io, json, sys
from silo.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    results.append([code, out.getvalue(), err.getvalue()])
sys.__stdout__.write(json.dumps(results))
"""


def _readme_grains() -> str:
    """The README's grain module (its first Python block)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match is not None
    return match.group(1)


def _to_run(folder: Path) -> list[tuple[str, list[str], int]]:
    """(where, argv, expected exit code) of each documented command run against the silo:
    the documents' sample folders name the test's folder."""
    runs: dict[tuple[str, ...], tuple[str, int]] = {}
    for command in COMMANDS:
        # the sample gateway is not the silo's (the table in orleanspy.toml names it); of a
        # synopsis, the variants with every optional part (and each alternative)
        argvs = [argv for argv in command.argvs if "--gateway" not in argv]
        longest = max(map(len, argvs), default=0)
        for argv in argvs:
            parser, used = _subcommand(argv)
            name = " ".join(parser.prog.split()[1:])
            if name not in RUN or len(argv) < longest or (
                    command.inline and used == len(argv) and name not in (
                        "cluster status", "streams status", "grains top", "reminders list")):
                continue
            real = tuple(a.replace("$PWD", str(folder)).replace("/srv/shop", str(folder))
                         for a in argv)
            runs.setdefault(real, (command.where, RUN[name]))
    return [(where, list(argv), code) for argv, (where, code) in runs.items()]


async def test_the_documented_commands_run_against_a_silo(tmp_path: Path):
    folder = tmp_path / "shop"
    (folder / "myapp").mkdir(parents=True)
    (folder / "myapp" / "__init__.py").write_text("")
    (folder / "myapp" / "grains.py").write_text(_readme_grains())
    # the folder of the silos' orleanspy.toml: every command finds the cluster in it
    (folder / "orleanspy.toml").write_text(
        'membership = "sqlite:cluster.db"\ncluster_id = "shop"\n\n'
        '[streams.events]\nadapter = "sqlite:streams.db"\ntotal_queues = 2\n')
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])

    # README: "orleanspy silo start --app myapp.grains --membership sqlite:$PWD/cluster.db
    # --port 0 --gateway-port 30000", on a free gateway port
    (start,) = [c for c in COMMANDS if c.where.startswith("README.md")
                and "--membership" in c.text and c.text.startswith("orleanspy silo start")
                and c.text.endswith("30000")]
    argv = [a.replace("$PWD", str(folder)) for a in start.argvs[0]]
    argv[argv.index("--gateway-port") + 1] = str(free_port())
    log_path = tmp_path / "silo.log"
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "silo", *argv, cwd=folder, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=log)
    silo = SiloProcess(proc, log_path, None)
    try:
        await silo.wait_ready(15)
        runs = _to_run(folder)
        quickstart = next(c for c in COMMANDS if c.text.startswith("orleanspy call Account"))
        (stop,) = [c for c in COMMANDS if c.text == "orleanspy silo stop --all"]
        argvs = [list(quickstart.argvs[0]), *(argv for _, argv, _ in runs),
                 list(stop.argvs[0])]
        driver = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _DRIVER, json.dumps(argvs), cwd=folder, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(30):
            out, err = await driver.communicate()
        assert driver.returncode == 0, err.decode()
        results = json.loads(out)

        # README: "orleanspy call Account alice deposit 10   # -> 10"
        code, stdout, stderr = results[0]
        assert (code, stdout.strip()) == (0, "10"), stderr
        ran = list(zip(runs, results[1:-1], strict=True))
        wrong = [f"{where}: orleanspy {' '.join(argv)} -> exit {got} (expected {expected}): "
                 f"{stderr.strip() or stdout.strip()}"
                 for (where, argv, expected), (got, stdout, stderr) in ran if got != expected]
        assert not wrong, "\n".join(wrong)
        by_name = {" ".join(argv[:2]): (stdout, stderr)
                   for (_, argv, _), (_, stdout, stderr) in ran}
        assert "Account/alice: active on" in by_name["grains locate"][0]
        assert "Account/alice" in by_name["grains show"][0]
        assert "cluster shop: 1 active" in by_name["cluster status"][0]
        assert "events" in by_name["streams status"][0]
        # README: "orleanspy silo stop --all   # graceful; waits for each exit"
        code, stdout, stderr = results[-1]
        assert code == 0, stderr
        assert await silo.wait_exit(STOP_TIMEOUT) == 0
    finally:
        await silo.kill()
