"""An adversarial user's inputs and faults, replayed on a real tiny sweep. Each ends in one of
three outcome classes: a clean refusal (one line naming the key or the file, no traceback, no
job run), a correct result, or a rebuilt cell (the damaged output's job reruns and no row is
lost). Set TILESWEEP_ATTACK_FUZZ=N for N more random cell damages after the fixed ones."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SNAKEMAKE, snakemake

from tilesweep.cli import main as cli
from tilesweep.errors import ConfigError

TINY = ["experiment=tiny"]
FUZZ = int(os.environ.get("TILESWEEP_ATTACK_FUZZ", "0"))


def _rows(work: Path) -> dict[str, int]:
    """Return the joined tables' row counts."""
    tables = work / "results" / "tables"
    return {p.stem: len(pd.read_csv(p)) for p in sorted(tables.glob("*.csv"))}


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """Return a finished tiny sweep (its own, since the attacks change it) and its row counts."""
    work = tmp_path_factory.mktemp("attacked")
    snakemake(work, "--cores", "2", overrides=TINY)
    return work, _rows(work)


def _damage(path: Path, how: str) -> None:
    """Damage one output as an attacker would."""
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "cut at a line":
        path.write_bytes(b"".join(data.splitlines(keepends=True)[:2]))
    elif how == "cut mid-line":
        path.write_bytes(data[: len(data) // 2])
    elif how == "same size":
        path.write_bytes(data[:-2] + (b"9\n" if data[-2:] != b"9\n" else b"8\n"))
    elif how == "deleted":
        path.unlink()
    elif how == "record deleted":
        Path(f"{path}.sum").unlink()


LONG = pytest.mark.skipif(not FUZZ, reason="one of the longer attacks: TILESWEEP_ATTACK_FUZZ=N")
REBUILT = [
    ("results/decode/baselines.csv", "empty"),
    ("results/collective/tp2-pp1-ep1.csv", "cut mid-line"),
    ("results/layout/tp1-pp1-ep1.csv", "same size"),
    ("results/decode/baselines.csv", "deleted"),
    ("results/tables/layout.csv", "deleted"),
    pytest.param("results/decode/baselines.csv", "cut at a line", marks=LONG),
    pytest.param("results/device/ceilings.json", "cut mid-line", marks=LONG),
    pytest.param("results/tables/decode.csv", "cut at a line", marks=LONG),
    pytest.param("results/layout/tp2-pp1-ep1.csv", "record deleted", marks=LONG),
]


def _label(case) -> str:
    rel, how = case.values if hasattr(case, "values") else case
    return f"{rel}-{how}"


@pytest.mark.slow
@pytest.mark.parametrize(("rel", "how"), REBUILT, ids=[_label(c) for c in REBUILT])
def test_a_damaged_output_is_rebuilt_and_no_row_is_lost(swept, rel, how):
    work, rows = swept
    path = work / rel
    _damage(path, how)
    damaged = path.read_bytes() if path.exists() else None
    plan = snakemake(work, "-n", overrides=TINY)
    assert f"tilesweep: {rel}: " in plan.stderr and "its job reruns" in plan.stderr
    assert (path.read_bytes() if path.exists() else None) == damaged  # a dry run removes nothing
    snakemake(work, "--cores", "2", overrides=TINY)
    assert _rows(work) == rows
    assert "Nothing to be done" in snakemake(work, "-n", overrides=TINY).stdout


@pytest.mark.slow
@LONG
def test_a_truncated_build_record_is_rebuilt(swept):
    work, rows = swept
    build = sorted((work / "results" / "build").rglob("build.json"))[0]
    _damage(build, "cut mid-line")
    snakemake(work, "--cores", "2", overrides=TINY)
    assert _rows(work) == rows
    assert "Nothing to be done" in snakemake(work, "-n", overrides=TINY).stdout


@pytest.mark.slow
@pytest.mark.skipif(not FUZZ, reason="set TILESWEEP_ATTACK_FUZZ=N for N random damages")
def test_random_damage_is_always_rebuilt(swept):
    work, rows = swept
    rng = random.Random(FUZZ)
    cells = sorted(p for p in (work / "results").rglob("*") if p.suffix in (".csv", ".json"))
    cells = [p for p in cells if Path(f"{p}.sum").exists()]
    kinds = ["empty", "cut at a line", "cut mid-line", "same size", "deleted", "record deleted"]
    for _ in range(FUZZ):
        _damage(rng.choice(cells), rng.choice(kinds))
        snakemake(work, "--cores", "2", overrides=TINY)
        assert _rows(work) == rows


@pytest.mark.slow
def test_a_failing_join_leaves_the_previous_tables(swept):
    """The tables step fails mid-way (a planted fault): Snakemake restores every table it had
    begun to replace (update()), and the next healthy run is a no-op for the cells."""
    work, rows = swept
    tables = work / "results" / "tables"
    before = {p.name: p.read_bytes() for p in tables.iterdir() if p.is_file()}
    env = {
        **os.environ,
        "TILESWEEP_PLUGINS": "plugins.planted_faults",
        "TILESWEEP_FAULT_JOIN": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--cores", "2"]
    cmd += ["--forcerun", "tables", "--config", 'overrides=["experiment=tiny"]']
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    assert proc.returncode != 0 and "planted fault in the tables step" in proc.stdout + proc.stderr
    after = {p.name: p.read_bytes() for p in tables.iterdir() if p.is_file()}
    assert after == before
    assert _rows(work) == rows


REFUSED = [
    ("bench.kernel_timeout_s=inf", "bench.kernel_timeout_s=inf: must be a finite number"),
    ("bench.kernel_timeout_s=nan", "bench.kernel_timeout_s=nan: must be a finite number"),
    ("model.hidden=" + "1" + "0" * 30, "model.hidden=1" + "0" * 30 + ": must be between"),
    ("grid.stages=[1000000]", "grid.stages[0]=1000000: must be between 1 and 16"),
    ("hardware.smem_per_block_optin=0", "hardware.smem_per_block_optin=0: must be greater"),
    ("hardware.memory_bandwidth_gbs=0", "hardware.memory_bandwidth_gbs=0: must be greater"),
    ("hardware=../../elsewhere/h200", "hardware=../../elsewhere/h200: a hardware option"),
    ("deployment.batches=[1,1]", "deployment.batches[1]=1: repeats"),
    ("grid.tokens_per_expert=[1,1]", "grid.tokens_per_expert[1]=1: repeats"),
    ("max_jobs=10", "over max_jobs=10: cut the grid, or raise the limit with max_jobs=N"),
]


@pytest.mark.slow  # runs snakemake
@pytest.mark.parametrize(("override", "message"), REFUSED, ids=[o for o, _ in REFUSED])
def test_a_bad_value_is_refused_in_one_line_before_any_job(tmp_path, override, message):
    proc = snakemake(tmp_path, "--cores", "1", overrides=[*TINY, override], check=False)
    _assert_refused(proc, message)
    assert not (tmp_path / "results").exists()


def _assert_refused(proc: subprocess.CompletedProcess, message: str) -> None:
    """Assert a clean refusal: non-zero exit, one tilesweep line holding message, no traceback."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("tilesweep: ")]
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert any(message in ln for ln in lines), proc.stderr[-2000:]


@pytest.mark.slow  # runs snakemake
def test_bad_command_line_values_are_refused_in_one_line(tmp_path):
    some_file = tmp_path / "a_file"
    some_file.write_text("x")
    cases = [
        ("overrides=5", "overrides=5: not a list of strings"),
        (f'overrides=["results_dir={some_file}"]', f"results_dir={some_file}: a file, not a"),
        ('overrides=["nosuch=1"]', "nosuch"),
    ]
    for config, message in cases:
        cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n"]
        proc = subprocess.run([*cmd, "--config", config], capture_output=True, text=True)
        _assert_refused(proc, message)


@pytest.mark.slow  # runs snakemake
def test_a_second_sweep_on_the_same_results_is_refused(tmp_path):
    """While one run holds the results folder (here: a process holding its lock), another run,
    a dry run included, stops in one line naming the holder; nothing is cleared."""
    holder = subprocess.Popen(
        [
            str(Path(SNAKEMAKE).with_name("python")),
            "-c",
            "import sys, time; from tilesweep.sweep_lock import hold; hold(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)",
            str(tmp_path / "results"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = snakemake(tmp_path, "-n", overrides=TINY, check=False)
        _assert_refused(proc, "another sweep is running on this results folder (pid ")
    finally:
        holder.kill()
        holder.wait()
    assert "Nothing to be done" not in snakemake(tmp_path, "-n", overrides=TINY).stdout


def test_the_command_line_tools_refuse_bad_arguments(tmp_path, capsys):
    for argv, message in [
        (["compare", str(tmp_path), str(tmp_path), "--threshold", "nan"], "--threshold=nan"),
        (["compare", str(tmp_path), str(tmp_path), "--threshold", "inf"], "--threshold=inf"),
        (["failed", str(tmp_path)], "no per-cell outputs here"),
        (["failed", str(tmp_path), "--status", "tmeout"], "'tmeout': not a status"),
    ]:
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_compare_names_a_table_whose_columns_differ(tiny_sweep, tmp_path, capsys):
    """A table with unexpected columns is compared on what both runs have, and the columns one
    run lacks are a change of their own, never passed over."""
    a = tiny_sweep / "results"
    b = tmp_path / "b"
    shutil.copytree(a / "tables", b / "tables")
    decode = pd.read_csv(b / "tables" / "decode.csv").rename(columns={"time_ms": "t_ms"})
    decode.to_csv(b / "tables" / "decode.csv", index=False)
    assert cli(["compare", str(a), str(b)]) == 0
    assert "columns in one run only" in capsys.readouterr().out
    from tilesweep import compare

    changes = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    schema = changes[(changes["table"] == "decode") & (changes["metric"] == "columns")]
    assert list(schema["a"]) == ["time_ms"] and bool(schema["beyond"].iloc[0])


def test_a_yaml_error_in_a_hardware_file_is_one_line_naming_it(tmp_path):
    """A hardware file that is not valid YAML is named, with its line, in one line."""
    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "hardware" / "h200.yaml").write_text("name: h200\narch: [sm_90\n")
    with pytest.raises(ConfigError) as err:
        compose(["hardware=h200"], conf)
    text = str(err.value)
    assert "\n" not in text and f"{conf / 'hardware' / 'h200.yaml'}, line 2: not valid YAML" in text
