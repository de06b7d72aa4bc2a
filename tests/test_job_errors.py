"""No Python traceback reaches a user from a Snakemake job or a tool (issue 50): an error nobody
expected is one line on stderr naming the cause, its full trace in the job's log (a tool: a file
the line names); a refusal or a damaged input keeps its own line."""

from __future__ import annotations

import ast
import os
import re
import runpy
import subprocess
from pathlib import Path

import pytest
from conftest import SNAKEMAKE

from tilesweep.errors import CellError, ConfigError, tool_main
from tilesweep.stages import job

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "workflow" / "scripts").glob("*.py"))
TOOLS = sorted((ROOT / "tools").glob("*.py"))
# The one line a job shows for an unexpected error, and where it says the trace went.
UNEXPECTED = re.compile(
    r"^tilesweep: (?P<rule>\w+): unexpected error, RuntimeError: planted (?P<what>\w+) "
    r"\(a bug, or the installed package changed; the full trace: (?P<trace>\S+)\)\n$"
)


class Planted:
    """A Snakemake job's named files or params whose every read fails as a bug would."""

    def __init__(self, what: str):
        self.what = what

    def __getattr__(self, name: str):
        raise RuntimeError(f"planted {self.what}")

    def __getitem__(self, key):
        raise RuntimeError(f"planted {self.what}")

    def items(self):
        """Fail as every other read does."""
        raise RuntimeError(f"planted {self.what}")


class FakeJob:
    """The `snakemake` object a script reads, with its log and a rule name."""

    def __init__(self, log: list[str], output: list[str] | None = None):
        self.rule = "some_rule"
        self.log = log
        self.output = output or Planted("output")
        self.input = Planted("input")
        self.params = Planted("params")
        self.wildcards = Planted("wildcards")
        self.threads = 1


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_job_shows_one_line_and_keeps_the_trace_in_its_log(tmp_path, capsys, script):
    """Each workflow script, its job failing as a bug would, exits 1 with one line naming the
    cause and its log; the log holds the full trace."""
    log = tmp_path / "logs" / "job.log"
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(script), {"snakemake": FakeJob([str(log)])}, "__main__")
    assert ended.value.code == 1
    line = capsys.readouterr().err
    found = UNEXPECTED.match(line)
    assert found and found["rule"] == "some_rule" and found["trace"] == str(log), line
    assert "Traceback" in log.read_text() and "RuntimeError: planted" in log.read_text()


def test_a_job_appends_its_trace_to_the_lines_it_logged(tmp_path, capsys):
    """The trace goes after what the job wrote to its log, which stays."""
    log = tmp_path / "job.log"
    log.write_text("rows: 12\n")
    with pytest.raises(SystemExit), job(FakeJob([str(log)])):
        raise RuntimeError("planted step")
    assert log.read_text().startswith("rows: 12\nTraceback")
    assert UNEXPECTED.match(capsys.readouterr().err)


def test_a_job_without_a_log_keeps_the_trace_beside_its_output(tmp_path, capsys):
    """A rule without a log: the trace goes beside its first output (inside results_dir)."""
    out = tmp_path / "results" / "tables" / "decode.csv"
    out.parent.mkdir(parents=True)
    with pytest.raises(SystemExit), job(FakeJob([], [str(out)])):
        raise RuntimeError("planted step")
    found = UNEXPECTED.match(capsys.readouterr().err)
    assert found and found["trace"] == f"{out}.trace.txt"
    assert "Traceback" in Path(f"{out}.trace.txt").read_text()


@pytest.mark.parametrize("error", [ConfigError("x=1: must be 2"), CellError("a.csv: cut short")])
def test_a_job_refusal_keeps_its_own_line(tmp_path, capsys, error):
    """A refusal or a damaged input is its own message on one line, the trace in the log."""
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as ended, job(FakeJob([str(log)])):
        raise error
    assert ended.value.code == 1
    assert capsys.readouterr().err == f"tilesweep: some_rule: {error} (its log: {log})\n"
    assert "Traceback" in log.read_text()


def test_a_job_refusal_names_its_log_only_where_it_was_written(tmp_path, capsys):
    """A log in a folder not made yet is made; a log that is a folder is not claimed."""
    log = tmp_path / "new" / "dir" / "job.log"
    with pytest.raises(SystemExit), job(FakeJob([str(log)])):
        raise ConfigError("x=1: must be 2")
    assert capsys.readouterr().err.endswith(f"(its log: {log})\n")
    assert "Traceback" in log.read_text()
    folder = tmp_path / "job.log"
    folder.mkdir()
    with pytest.raises(SystemExit), job(FakeJob([str(folder)])):
        raise ConfigError("x=1: must be 2")
    err = capsys.readouterr().err
    assert err == f"tilesweep: some_rule: x=1: must be 2 (its log {folder} could not be written)\n"


@pytest.mark.slow  # runs snakemake (a dry run); the fast tier holds unexpected()'s line below
def test_a_plan_that_fails_as_a_bug_would_is_one_line(tmp_path):
    """An error nobody expected while the Snakefile plans the sweep (a planted fault): one line
    naming the cause and a file holding the trace, no traceback (a dry run: no job runs)."""
    env = {
        **os.environ,
        "TILESWEEP_PLUGINS": "plugins.planted_faults",
        "TILESWEEP_FAULT_PLAN": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n"]
    cmd += ["--config", 'overrides=["experiment=tiny"]']
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("tilesweep:")]
    _names_its_trace(
        ours[-1] if len(ours) == 1 else "",
        "tilesweep",
        "RuntimeError: planted fault in the plan",
        proc.stderr,
    )


def test_a_tool_shows_one_line_and_names_its_trace_file(capsys):
    """A tool's unexpected error: one line naming the tool and a file holding the trace."""

    def broken() -> int:
        raise RuntimeError("planted tool")

    assert tool_main("some_tool", broken) == 1
    line = capsys.readouterr().err
    assert line.endswith("\n") and line.count("\n") == 1, line
    _names_its_trace(line[:-1], "some_tool", "RuntimeError: planted tool", line)


def _names_its_trace(line: str, who: str, error: str, shown: str) -> None:
    """Assert `line` is the one-line unexpected-error message of `who` for `error`, naming a
    trace file that holds the Python traceback (the file is removed after)."""
    found = re.fullmatch(
        rf"{who}: unexpected error, {re.escape(error)} \(a bug, or the installed package "
        r"changed; the full trace: (\S+)\)",
        line,
    )
    assert found, shown
    trace = Path(found[1])
    try:
        text = trace.read_text()
        assert "Traceback" in text and error.split(": ", 1)[1] in text
    finally:
        trace.unlink()


def test_a_tool_refusal_keeps_its_own_line(capsys):
    """A refusal stays its own line (exit 2); a bad file its error's last line (exit 1)."""

    def refuses() -> int:
        raise ConfigError("--out='': empty")

    def bad_file() -> int:
        raise FileNotFoundError("no such file: x.csv")

    assert tool_main("some_tool", refuses) == 2
    assert tool_main("some_tool", bad_file) == 1
    err = capsys.readouterr().err
    assert err == "some_tool: --out='': empty\nsome_tool: FileNotFoundError: no such file: x.csv\n"


def _main_calls(path: Path) -> list[str]:
    """Return the source of each call under the file's `if __name__ == "__main__":`."""
    tree = ast.parse(path.read_text())
    calls = []
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            calls += [ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.Call)]
    return calls


@pytest.mark.parametrize("tool", TOOLS, ids=[t.stem for t in TOOLS])
def test_every_tool_runs_its_main_through_tool_main(tool):
    """Every tools/*.py runs main through errors.tool_main: no traceback reaches its user."""
    assert any(c.startswith(f"tool_main({tool.stem!r}, main)") for c in _main_calls(tool))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_script_runs_inside_its_job(script):
    """Every workflow script's work runs inside `with job(snakemake):` (its one line and log)."""
    tree = ast.parse(script.read_text())
    main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert len(main) == 1 and len(main[0].body) == 1, "one `with job(snakemake):` under main"
    block = main[0].body[0]
    assert isinstance(block, ast.With) and ast.unparse(block.items[0]) == "job(snakemake)"
    outside = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom | ast.If)]
    assert all(isinstance(n, ast.Expr) for n in outside)  # the docstring only
