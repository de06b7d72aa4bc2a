"""Issue 50, round eight: a mistyped TILESWEEP_PLUGINS is the user's typo, refused in one line
that names the entry and what is wrong with it (never "a bug", never a traceback), from the
loader itself and from the `tilesweep` command and the Snakefile that import it (fast tier)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SNAKEMAKE, stub_bin

from tilesweep import backends
from tilesweep.plugin_loader import PluginError, entries, load

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
TESTS = str(ROOT / "tests")

TYPOS = [
    ("nosuch_plugin_r58", r"'nosuch_plugin_r58': no module 'nosuch_plugin_r58' on the import path"),
    ("plugins.planted", r"package 'plugins' has no module 'planted'; did you mean planted_f"),
    ("tilesweep.backend", r"package 'tilesweep' has no module 'backend'; did you mean backends\?"),
    ("tilesweep.backends.register", r"'register' is an attribute of 'tilesweep.backends', not a"),
    ("os.path.nosuch", r"'os.path' is a module, not a package: no module 'nosuch' in it$"),
    ("os.path.join", r"no module 'join' in it \('join' is an attribute: give 'os.path'\)"),
    ("plugins.planted_faults:PlantedFaults", r"entry 1 .* names an attribute; .* 'plugins.pla"),
    ("plugins.planted_faults,,x", r"='plugins.planted_faults,,x': entry 2 is empty"),
    (",", r"=',': entry 1 is empty"),
    ("tests/plugins/planted_faults.py", r"entry 1 .* is a path; give the module's import name"),
    ("planted_faults.py", r"entry 1 \('planted_faults.py'\) is a path"),
    ("plugins..planted_faults", r"entry 1 \('plugins..planted_faults'\) is not a module name"),
    ("plugins.planted_faults,nosuch_r58", r"'nosuch_r58': no module 'nosuch_r58'"),
]


@pytest.mark.parametrize(("value", "said"), TYPOS)
def test_a_mistyped_plugin_entry_is_named_in_one_line(value, said):
    """Each kind of typo: one line naming the entry and what is wrong, not a bug's line."""
    with pytest.raises(PluginError, match=said) as err:
        load(value)
    line = str(err.value)
    assert line.startswith("TILESWEEP_PLUGINS") and "\n" not in line
    assert "bug" not in line and "Traceback" not in line


def test_no_plugins_and_good_plugins_load():
    """Unset or empty is no plugin; good names load (the planted faults register a backend)."""
    assert entries("") == [] and entries(" ") == []
    assert entries("plugins.planted_faults, os.path") == ["plugins.planted_faults", "os.path"]
    load("plugins.planted_faults,os.path")
    from plugins.planted_faults import PlantedFaults

    backends.register(PlantedFaults)
    try:
        assert "fault" in [b.name for b in backends.registered()]
    finally:
        backends.unregister("fault")


def test_a_plugin_whose_own_import_fails_names_its_line_and_trace(tmp_path, monkeypatch):
    """The plugin's own error (a module it imports is missing, its syntax): its file and line,
    the trace kept in a file, and still one line."""
    (tmp_path / "needs_r58.py").write_text("import os\nimport nosuch_dependency_r58\n")
    (tmp_path / "syntax_r58.py").write_text("x = (\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as err:
        load("needs_r58")
    line = str(err.value)
    assert "'needs_r58' failed to import: ModuleNotFoundError: No module named 'nosuch_dep" in line
    assert f"{tmp_path / 'needs_r58.py'}, line 2; the full trace: " in line
    Path(line.rsplit("the full trace: ", 1)[1].rstrip(")")).unlink()
    with pytest.raises(PluginError, match=r"'syntax_r58' failed to import: SyntaxError: ") as err:
        load("syntax_r58")
    assert f"{tmp_path / 'syntax_r58.py'}, line 1;" in str(err.value)
    Path(str(err.value).rsplit("the full trace: ", 1)[1].rstrip(")")).unlink()


def _one_line(proc: subprocess.CompletedProcess) -> str:
    """Return the one tilesweep line of a refused run, checking it is alone and has no frames."""
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and 'File "' not in proc.stderr
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("tilesweep:")]
    assert len(ours) == 1, proc.stderr
    assert "bug" not in ours[0]
    return ours[0]


def test_the_command_refuses_a_mistyped_plugin_in_one_line(tmp_path):
    """`tilesweep verdict` with TILESWEEP_PLUGINS=plugins.planted (a typo): its one line."""
    env = {**os.environ, "TILESWEEP_PLUGINS": "plugins.planted", "PYTHONPATH": f"{SRC}:{TESTS}"}
    cmd = [sys.executable, "-m", "tilesweep.cli", "verdict", "--out", str(tmp_path / "v")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.stderr.strip() == _one_line(proc)
    assert _one_line(proc) == (
        "tilesweep: TILESWEEP_PLUGINS: 'plugins.planted': package 'plugins' has no module "
        "'planted'; did you mean planted_faults?"
    )
    assert not (tmp_path / "v").exists()


@pytest.mark.slow  # runs snakemake
def test_the_snakefile_refuses_a_mistyped_plugin_in_one_line(tmp_path):
    """`snakemake -n` with an empty entry: the loader's line, not the package's import error."""
    env = {**os.environ, "TILESWEEP_PLUGINS": "plugins.planted_faults,", "PYTHONPATH": SRC}
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert _one_line(proc) == (
        "tilesweep: TILESWEEP_PLUGINS='plugins.planted_faults,': entry 2 is empty; give module "
        "names separated by single commas"
    )


def test_stopping_gpu_sh_sweep_stops_its_snakemake(tmp_path):
    """`tools/gpu.sh sweep` given a TERM (a device call's limit, Ctrl-C) stops the Snakemake it
    started, though `timeout` runs that in a process group of its own, and still reports and
    archives (round five's G16 found the sweep running on after gpu.sh was gone)."""
    pid_file = tmp_path / "snakemake.pid"
    python3 = f'case "$1" in -c) exit 0;; esac\necho $$ > {pid_file}\nexec sleep 60'
    stubs = stub_bin(tmp_path, python3=python3, nvidia_smi="echo gpu")
    (tmp_path / "Snakefile").touch()  # a checkout's root, as the task asks for
    (tmp_path / "conf").mkdir()
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}")
    cmd = ["bash", str(ROOT / "tools/gpu.sh"), "sweep", "out"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # the stub Snakemake has started
            if pid_file.is_file() and pid_file.read_text().strip():
                break
            time.sleep(0.1)
        snakemake = int(pid_file.read_text())
        proc.terminate()
        out, _ = proc.communicate(timeout=40)
    finally:
        proc.kill()
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # gone within seconds of the TERM
            os.kill(snakemake, 0)
            time.sleep(0.1)
        os.kill(snakemake, 9)  # still there: stop it, and fail
    assert proc.returncode == 143 and "snakemake exit 143 after" in out, out
    assert (tmp_path / "out" / "snakemake.log").is_file()


def test_a_column_renamed_in_the_package_data_is_named_in_one_line(tmp_path):
    """P06: `tpot_ms` renamed in a copy of the package's data/columns.yaml: the command ends in
    one line naming the file, the list and the column, not "unexpected error, KeyError"."""
    from tilesweep import columns

    assert columns.missing_asked(columns._LISTS) is None  # the shipped file has every column
    renamed = dict(
        columns._LISTS,
        VERDICT_COLUMNS=["tpot_msx" if c == "tpot_ms" else c for c in columns.VERDICT_COLUMNS],
    )
    assert columns.missing_asked(renamed) == ("VERDICT_COLUMNS", "tpot_ms")
    copy = tmp_path / "src"
    shutil.copytree(
        Path(SRC) / "tilesweep", copy / "tilesweep", ignore=shutil.ignore_patterns("__pycache__")
    )
    data = copy / "tilesweep" / "data" / "columns.yaml"
    data.write_text(data.read_text().replace(" tpot_ms,", " tpot_msx,"))
    (tmp_path / "conf").symlink_to(ROOT / "conf")  # the checkout beside the copied package
    fit = tmp_path / "docs" / "examples" / "h200"
    fit.mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "examples" / "h200" / "fit.json", fit)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    code = "import sys; from tilesweep.cli import main; sys.argv = ['tilesweep', 'verdict']; main()"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    line = run.stderr.strip()
    assert run.returncode != 0 and "\n" not in line and "Traceback" not in line, run.stderr
    assert (
        "tilesweep/data/columns.yaml: tilesweep.columns.VERDICT_COLUMNS: no column 'tpot_ms'"
        in line
    )
    assert "KeyError" not in line and "bug" not in line
