"""Issue 50, round seven: the classes of failure its replays and fresh cases found, each a test
(fast tier): a failing job ends in the job's own line and the console's short account, never
Snakemake's block; an error while the Snakefile imports the package is one line; `tilesweep
compare` holds a recorded run's tables to their records and says when a run has none; a config
file that is a pipe is named before Hydra would block reading it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import SNAKEMAKE, fast_sample

from tilesweep.cells import summary_path, write_cell_table
from tilesweep.cli import main

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
# Snakemake's own account of a failed job, which the console folds into its `failed` line.
SNAKEMAKE_BLOCK = ("Error in rule", "RuleException", "WorkflowError", "Exiting because")

FAILING = """
import sys
from tilesweep.progress import attach

if workflow.is_main_process:
    attach(workflow)

rule all:
    input: "b.txt"

rule a:
    output: "a.txt"
    shell: "echo ok > {output}"

rule b:
    input: "a.txt"
    output: "b.txt"
    log: "logs/b.log"
    shell: "{CAUSE}"
"""


def _run_failing(tmp_path: Path, cause: str) -> subprocess.CompletedProcess:
    """Run a two-rule workflow whose second job fails with `cause` (a shell line) under the
    project's console; return it."""
    (tmp_path / "Snakefile").write_text(FAILING.replace("{CAUSE}", cause))
    env = {**os.environ, "PYTHONPATH": SRC}
    cmd = [SNAKEMAKE, "--cores", "1", "-s", str(tmp_path / "Snakefile")]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.slow  # runs snakemake
@pytest.mark.parametrize(
    ("cause", "said"),
    [
        ("echo 'tilesweep: b: the cause named here' >&2; exit 1", "exit status 1"),
        ("kill -9 $$", "killed by SIGKILL"),
    ],
)
def test_a_failed_job_ends_in_its_own_line_and_one_short_account(tmp_path, cause, said):
    """The job's own line first, then `[tilesweep] b failed (...)` and `stopped: ...` naming
    Snakemake's log, which keeps Snakemake's block; no `Error in rule` block, no frames."""
    proc = _run_failing(tmp_path, cause)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    for text in (*SNAKEMAKE_BLOCK, "Traceback", 'File "'):
        assert text not in err, err
    assert f"[tilesweep] b failed ({said}); its log: logs/b.log" in err, err
    stopped = [ln for ln in err.splitlines() if ln.startswith("[tilesweep] stopped: ")]
    assert len(stopped) == 1 and "1 job failed (b)" in stopped[0], err
    if "tilesweep: b:" in cause:
        lines = err.splitlines()
        assert lines.index("tilesweep: b: the cause named here") < lines.index(stopped[0])
    log = Path(re.search(r"Snakemake's own account in (\S+)", stopped[0])[1])
    assert "Error in rule b" in log.read_text()


@pytest.mark.slow  # runs snakemake
def test_verbose_keeps_snakemakes_block(tmp_path):
    """--verbose shows Snakemake's own lines, its failure block included."""
    (tmp_path / "Snakefile").write_text(FAILING.replace("{CAUSE}", "exit 3"))
    env = {**os.environ, "PYTHONPATH": SRC}
    cmd = [SNAKEMAKE, "--cores", "1", "--verbose", "-s", str(tmp_path / "Snakefile")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1 and "Error in rule b" in proc.stderr


@pytest.mark.slow  # runs snakemake
def test_an_error_while_the_snakefile_imports_the_package_is_one_line(tmp_path):
    """A dependency that fails to import (here a planted `omegaconf` ahead of the installed one):
    one line naming the error and a trace file, not Snakemake's frames. (A plugin that fails to
    import is the plugin loader's line: tests/test_attacks_r58.py.)"""
    (tmp_path / "omegaconf").mkdir()
    (tmp_path / "omegaconf" / "__init__.py").write_text(
        "raise RuntimeError('planted import fault')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), SRC])}
    env.pop("TILESWEEP_PLUGINS", None)
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout and 'File "' not in proc.stderr
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("tilesweep:")]
    assert len(ours) == 1, proc.stderr
    found = re.fullmatch(
        # OmegaConf is imported where a config is first composed (group_files parses with libyaml
        # and imports it only for `${...}`), so the planted fault may surface there: one line still
        r"tilesweep: (the package cannot be imported: )?unexpected error, RuntimeError: planted "
        r"import fault \(a bug, or the installed package changed; the full trace: (\S+)\)",
        ours[0],
    )
    assert found, ours[0]
    trace = Path(found[2])
    try:
        assert "planted import fault" in trace.read_text()
    finally:
        trace.unlink()


def _recorded_run(folder: Path) -> Path:
    """Write a results folder of two recorded tables (as a sweep's jobs write them)."""
    tables = folder / "tables"
    tables.mkdir(parents=True)
    engines = pd.DataFrame({"engine": ["SGLang"], "batch": [8], "composed_tpot_ms": [10.0]})
    power = pd.DataFrame({"layout": ["tp1"], "status": ["ok"], "power_frac_median": [0.5]})
    write_cell_table(tables / "engines.csv", engines)
    write_cell_table(tables / "power.csv", power)
    return folder


def test_compare_holds_a_recorded_runs_tables_to_their_records(tmp_path, capsys):
    """A run whose tables carry records: a table whose record is gone, or a record whose table
    is gone, is refused in one line; a run with no record at all is compared with a note."""
    a, b = _recorded_run(tmp_path / "a"), _recorded_run(tmp_path / "b")
    assert main(["compare", str(a), str(b)]) == 0
    assert "Note:" not in capsys.readouterr().out
    summary_path(b / "tables" / "engines.csv").unlink()
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "engines.csv: no engines.csv.sum record beside it" in err
    write_cell_table(b / "tables" / "engines.csv", pd.read_csv(b / "tables" / "engines.csv"))
    (b / "tables" / "power.csv").unlink()
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "power.csv: missing, though its power.csv.sum record" in err
    for record in (b / "tables").glob("*.sum"):
        record.unlink()
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"Note: B ({b}): its tables carry no .sum records" in out
    assert "Note: A" not in out


def _copy_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    return conf


# Each composes in a process of its own (a pipe that blocked would hang this one): the fast tier
# runs the first.
@pytest.mark.parametrize(
    ("target", "overrides"),
    fast_sample(
        [
            ("engine/sglang.yaml", ["engine=sglang_b12x"]),  # a file a chosen file derives from
            ("deployment/fp8_all.yaml", ["deployment=fp8_all", "hardware=h200"]),
            ("engine/vllm.yaml", []),  # a file nothing chose
        ]
    ),
)
def test_a_config_file_that_is_a_pipe_is_named_before_hydra_reads_it(tmp_path, target, overrides):
    """A FIFO among the config files would block Hydra's read forever: one line names it."""
    conf = _copy_conf(tmp_path)
    (conf / target).unlink()
    os.mkfifo(conf / target)
    code = (
        "import sys\nfrom pathlib import Path\nfrom tilesweep.config import compose\n"
        "from tilesweep.errors import ConfigError\n"
        "try:\n    compose(sys.argv[2:], Path(sys.argv[1]))\n"
        "except ConfigError as err:\n    sys.exit(f'tilesweep: {err}')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(conf), *overrides],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        f"tilesweep: {conf / target}: not a plain file (a pipe, a device or a socket): reading "
        "it would block; a config file is a plain YAML file\n"
    )


def test_a_config_file_that_links_to_nothing_is_named(tmp_path):
    from tilesweep.config import check_conf_files
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    (conf / "deployment" / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    with pytest.raises(ConfigError, match=r"gone\.yaml: a link to nothing"):
        check_conf_files(conf)


def test_a_cell_or_record_that_is_a_pipe_is_damage_never_a_blocking_read(tmp_path):
    """A cell or its .sum record replaced by a pipe is named as damage (the plan rebuilds it,
    compare and failed name it); nothing waits on the pipe."""
    code = (
        "import sys\nfrom tilesweep.cells import damage\n"
        "print(damage(sys.argv[1]))\nprint(damage(sys.argv[2]))\n"
    )
    cell = tmp_path / "cell.csv"
    write_cell_table(cell, pd.DataFrame({"status": ["ok"]}))
    summary_path(cell).unlink()
    os.mkfifo(summary_path(cell))
    piped = tmp_path / "piped.csv"
    write_cell_table(piped, pd.DataFrame())
    piped.unlink()
    os.mkfifo(piped)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(cell), str(piped)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
    )
    assert proc.stdout.splitlines() == [
        "its .sum record is unreadable (not a plain file)",
        "not a plain file (a folder, a pipe or a device)",
    ], proc.stderr
    run = _recorded_run(tmp_path / "run")
    os.replace(tmp_path / "cell.csv.sum", run / "tables" / "power.csv.sum")
    assert main(["compare", str(run), str(run)]) == 2


def test_a_rebuild_ledger_that_is_a_pipe_is_refused_in_one_line(tmp_path):
    from tilesweep.cells import LEDGER, rebuilds
    from tilesweep.errors import ConfigError

    os.mkfifo(tmp_path / LEDGER)
    with pytest.raises(ConfigError, match=r"\.rebuilds\.json: not a plain file"):
        rebuilds(tmp_path)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("/dev/zero", "not a plain file (a pipe or a device)"),
        ("docs", "a folder, not a file"),
        ("a" * 5000, "cannot be read (File name too long)"),
        ("nosuch_r57.json", "no such file"),
    ],
)
def test_a_deployment_file_that_is_no_file_is_named_for_what_it_is(value, why):
    """A fit file that is a device, a folder or a name too long is named as what it is, in one
    short line (the value cut), never 'no such file' for one that exists, never a bug's line."""
    from tilesweep.config import compose
    from tilesweep.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        compose([f"deployment.fit_file={value}", "read_outside=true"])
    line = str(err.value)
    assert why in line and len(line) < 400 and "\n" not in line, line


@pytest.mark.parametrize("text", ["", "a: 1\n", "- x\n"])
def test_a_root_config_without_its_defaults_list_is_named(tmp_path, text):
    """conf/config.yaml emptied or replaced: one line naming it, not Hydra's word on an
    override the verdict adds."""
    from tilesweep.config import check_conf_files
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    (conf / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"config\.yaml: (no `defaults` list|holds nothing)"):
        check_conf_files(conf)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"b{i}: &b{i} [{','.join([('*a' if i == 0 else f'*b{i - 1}')] * 10)}]\n"
                for i in range(9)
            ),
            "aliases expand past 1,000,000 values",
        ),
        ("a: &a [1, *a]\n", "a YAML alias inside its own anchor"),
    ],
)
def test_a_config_file_whose_aliases_never_end_is_named(tmp_path, text, why):
    """An alias bomb, or an alias inside itself, in any config file: one line naming it,
    before OmegaConf would copy it out forever."""
    from tilesweep.config import check_conf_files
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    (conf / "model" / "bomb.yaml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(why)):
        check_conf_files(conf)


def test_a_group_option_that_is_a_folder_is_named_not_listed_as_valid(tmp_path):
    from tilesweep.config import compose
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    (conf / "engine" / "x.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"engine='x': .*x\.yaml is a folder, not a config file"):
        compose(["engine=x"], conf)
    with pytest.raises(ConfigError) as err:
        compose(["engine=y"], conf)
    assert "unknown engine" in str(err.value) and ", x" not in str(err.value)


def test_a_config_file_of_bytes_that_are_not_text_is_named(tmp_path):
    from tilesweep.config import check_conf_files
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    (conf / "engine" / "sglang.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"sglang\.yaml: not text \(bytes that are not UTF-8\)"):
        check_conf_files(conf)


def test_hydras_missing_default_names_the_options_without_its_search_path(tmp_path):
    from tilesweep.config import compose
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    root = conf / "config.yaml"
    root.write_text(root.read_text().replace("  - engine: sglang", "  - engine: nosuch", 1))
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    line = str(err.value)
    assert "Could not find 'engine/nosuch'" in line and "sglang_b12x" in line, line
    assert "provider=" not in line


def test_failed_names_an_output_of_a_recorded_run_that_lost_its_record(tmp_path):
    """`tilesweep failed` on a run whose outputs carry records: one whose record is gone is
    listed (the plan reruns it); a run with no record at all is read as it is."""
    from tilesweep.failures import failed_rows

    ok = pd.DataFrame({"kernel": ["k"], "status": ["ok"]})
    (tmp_path / "decode").mkdir()
    for name in ("a.csv", "b.csv"):
        write_cell_table(tmp_path / "decode" / name, ok)
    assert failed_rows(tmp_path).empty
    summary_path(tmp_path / "decode" / "b.csv").unlink()
    rows = failed_rows(tmp_path)
    assert list(rows["path"]) == [tmp_path / "decode" / "b.csv"]
    assert "no .sum record beside it" in rows["reason"].iloc[0]
    summary_path(tmp_path / "decode" / "a.csv").unlink()
    assert failed_rows(tmp_path).empty


def test_a_tool_given_a_pipe_names_it_and_never_waits_on_it(tmp_path):
    """Each tool's input file replaced by a pipe: one line naming it as not a plain file, exit 2,
    nothing changed, no read that blocks."""
    for folder in ("it", "ie", "ct", "ts/tune/fused_moe"):
        (tmp_path / folder).mkdir(parents=True)
    pipes = {
        "it": tmp_path / "it" / "engine_tables.tgz",
        "ie": tmp_path / "ie" / "results.tgz",
        "ct": tmp_path / "ct" / "fit.json",
        "ts": tmp_path / "ts" / "tune" / "fused_moe" / "x.csv",
    }
    for pipe in pipes.values():
        os.mkfifo(pipe)
    steps = ROOT / "docs" / "examples" / "h200" / "layout.csv"
    runs = {
        "it": ["bash", "tools/import_engine_tables.sh", str(tmp_path / "it")],
        "ie": ["bash", "tools/import_example.sh", str(pipes["ie"]), str(tmp_path / "ie")],
        "ct": [
            sys.executable,
            "tools/check_transfer.py",
            str(pipes["ct"]),
            str(steps),
            "datasheet",
            str(tmp_path / "ct" / "out.csv"),
        ],
        "ts": [sys.executable, "tools/tune_summary.py", str(tmp_path / "ts")],
    }
    env = {**os.environ, "PYTHONPATH": SRC}
    before = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True).stdout
    for key, cmd in runs.items():
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2, (key, proc.stderr)
        assert proc.stderr.count("\n") == 1 and f"{pipes[key]}: not a plain file" in proc.stderr
    after = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True).stdout
    assert after == before


def test_fetch_engine_kernels_checks_where_it_writes_before_fetching(tmp_path):
    """An --out it cannot write is one line before any wheel is fetched (it was a bare
    FileNotFoundError after the download, pip's warnings first)."""
    proc = subprocess.run(
        [sys.executable, "tools/fetch_engine_kernels.py", "--out", "/proc/self/x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "fetch_engine_kernels: --out=/proc/self/x: cannot write there (No such file or directory)\n"
    )


@pytest.mark.parametrize("text", ["", "# all gone\n\n", "---\n"])
def test_a_config_file_emptied_is_named_not_read_as_defaults(tmp_path, text):
    """conf/question/brief.yaml emptied composed silently, on other defaults (another answer):
    one line names it."""
    from tilesweep.config import check_conf_files
    from tilesweep.errors import ConfigError

    conf = _copy_conf(tmp_path)
    (conf / "question" / "brief.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"brief\.yaml: holds nothing"):
        check_conf_files(conf)


def test_a_record_or_ledger_holding_1e400_is_unreadable_not_a_bug(tmp_path, capsys):
    """A .sum whose byte count is 1e400 (JSON's inf) was 'unexpected error, OverflowError' in
    compare; the ledger likewise. Both are named as unreadable records."""
    from tilesweep.cells import LEDGER, damage, rebuilds
    from tilesweep.errors import ConfigError

    run = _recorded_run(tmp_path / "run")
    record = summary_path(run / "tables" / "power.csv")
    record.write_text(record.read_text().replace('"bytes": ', '"bytes": 1e400, "was": ', 1))
    assert damage(run / "tables" / "power.csv") == "its .sum record is unreadable"
    assert main(["compare", str(run), str(run)]) == 2
    err = capsys.readouterr().err
    assert "power.csv: its .sum record is unreadable" in err and "unexpected" not in err
    (tmp_path / LEDGER).write_text('{"a": 1e400}')
    with pytest.raises(ConfigError, match="unreadable; delete it"):
        rebuilds(tmp_path)
