"""An adversarial user's inputs and faults, replayed on a real tiny sweep. Each ends in one of
three outcome classes: a clean refusal (one line naming the key or the file, no traceback, no
job run), a correct result, or a rebuilt cell (the damaged output's job reruns and no row is
lost). Set TILESWEEP_ATTACK_FUZZ=N for N more random cell damages after the fixed ones."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SNAKEMAKE, fast_sample, snakemake

from tilesweep.cli import main as cli
from tilesweep.errors import ConfigError

TINY = ["experiment=tiny"]
FUZZ = int(os.environ.get("TILESWEEP_ATTACK_FUZZ", "0"))


def _rows(work: Path) -> dict[str, int]:
    """Return the joined tables' row counts."""
    tables = work / "results" / "tables"
    return {p.stem: len(pd.read_csv(p)) for p in sorted(tables.glob("*.csv"))}


@pytest.fixture(scope="module")
def swept(tiny_sweep, tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """Return a finished tiny sweep (a copy of the session's, since the attacks change it, with
    Snakemake's records) and its row counts."""
    work = tmp_path_factory.mktemp("attacked") / "work"
    shutil.copytree(tiny_sweep, work, symlinks=True)
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
    elif how == "a folder":
        path.unlink()
        path.mkdir()
        (path / "inside").write_text("x")


def _state(path: Path) -> object:
    """Return a file's bytes, 'a folder', or None when nothing is there."""
    if path.is_dir():
        return "a folder"
    return path.read_bytes() if path.exists() else None


LONG = pytest.mark.skipif(not FUZZ, reason="one of the longer attacks: TILESWEEP_ATTACK_FUZZ=N")
CUBIN = "results/build/triton/sm_90/bf16-m16n64k64-s2-w4-default/kernel.cubin"
# Each round's damages run one sweep. A round damages several outputs only where each is still
# named on its own line by the dry run (at most five a round: cells.rebuild_lines groups the
# rest) and rebuilt: a deleted cell (missing, not damaged) is rebuilt only while the joined
# tables exist, so it has no joined output beside it.
REBUILT = [
    [
        ("results/decode/baselines.csv", "empty"),
        ("results/collective/tp2-pp1-ep1.csv", "cut mid-line"),
        ("results/layout/tp1-pp1-ep1.csv", "same size"),
        (CUBIN, "deleted"),
        ("results/decode/baselines-fp8.csv", "deleted"),
    ],
    [
        ("results/decode/baselines.csv", "a folder"),
        ("results/tables/layout.csv", "deleted"),
        ("results/tables/decode.parquet", "cut mid-line"),
        ("results/tables/provenance.json", "deleted"),
        ("results/plots/pareto.png", "cut mid-line"),
    ],
    pytest.param([("results/decode/baselines.csv", "cut at a line")], marks=LONG),
    pytest.param([("results/device/ceilings.json", "cut mid-line")], marks=LONG),
    pytest.param([("results/tables/decode.csv", "cut at a line")], marks=LONG),
    pytest.param([("results/layout/tp2-pp1-ep1.csv", "record deleted")], marks=LONG),
]


def _label(case) -> str:
    damages = case.values[0] if hasattr(case, "values") else case
    return "+".join(f"{rel}-{how}" for rel, how in damages)


@pytest.mark.slow
@pytest.mark.parametrize("damages", REBUILT, ids=[_label(c) for c in REBUILT])
def test_a_damaged_output_is_rebuilt_and_no_row_is_lost(swept, damages):
    work, rows = swept
    for rel, how in damages:
        _damage(work / rel, how)
    states = {rel: _state(work / rel) for rel, _ in damages}
    ledger = _state(work / "results" / ".rebuilds.json")
    plan = snakemake(work, "-n", overrides=TINY)
    for rel, _ in damages:
        # A file written beside a cell (a build's cubin) is named through the cell's record.
        named = rel if Path(rel).name != "kernel.cubin" else str(Path(rel).with_name("build.json"))
        lines = [ln for ln in plan.stderr.splitlines() if ln.startswith(f"tilesweep: {named}: ")]
        assert len(lines) == 1 and lines[0].endswith("; its job reruns"), plan.stderr[-2000:]
    assert {rel: _state(work / rel) for rel, _ in damages} == states  # a dry run removes nothing
    assert _state(work / "results" / ".rebuilds.json") == ledger  # and writes no ledger
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


REFUSED = [
    ("bench.kernel_timeout_s=inf", "bench.kernel_timeout_s=inf: must be a finite number"),
    ("bench.kernel_timeout_s=nan", "bench.kernel_timeout_s=nan: must be a finite number"),
    ("model.hidden=" + "1" + "0" * 30, "model.hidden=1" + "0" * 30 + ": must be between"),
    ("grid.stages=[1000000]", "grid.stages[0]=1000000: must be between 1 and 16"),
    ("hardware.smem_per_block_optin=0", "hardware.smem_per_block_optin=0: must be more than 0"),
    ("hardware.memory_bandwidth_gbs=0", "hardware.memory_bandwidth_gbs=0: must be more than 0"),
    ("hardware=../../elsewhere/h200", "hardware=../../elsewhere/h200: a hardware option"),
    ("deployment.batches=[1,1]", "deployment.batches[1]=1: repeats"),
    ("grid.tokens_per_expert=[1,1]", "grid.tokens_per_expert[1]=1: repeats"),
    ("bench.repeats=1000000000", "bench.repeats=1000000000: must be between 1 and 10,000"),
    ("max_jobs=10", "over max_jobs=10: cut the grid, or raise the limit with max_jobs=N"),
]


@pytest.mark.parametrize(("override", "message"), fast_sample(REFUSED), ids=[o for o, _ in REFUSED])
def test_a_bad_value_is_refused_in_one_line(override, message):
    """Each is planned as the Snakefile plans it (Sweep, with no device given); the test below
    runs snakemake on two of them: the Snakefile turns the refusal into its line before any job."""
    from tilesweep.pipeline import Sweep

    with pytest.raises(ConfigError) as err:
        Sweep([*TINY, override], ROOT / "conf")
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


@pytest.mark.slow  # runs snakemake
@pytest.mark.parametrize(
    ("override", "message"), [REFUSED[0], REFUSED[-1]], ids=[REFUSED[0][0], REFUSED[-1][0]]
)
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
    """Each is planned as the Snakefile plans it; snakemake itself refuses the first."""
    some_file = tmp_path / "a_file"
    some_file.write_text("x")
    cases = [
        ("overrides=5", "overrides=5: not a list of strings"),
        (f'overrides=["results_dir={some_file}"]', f"results_dir={some_file}: a file, not a"),
        ('overrides=["nosuch=1"]', "nosuch"),
    ]
    for config, message in cases:
        with pytest.raises(ConfigError) as err:
            _plan_config(config)
        assert "\n" not in str(err.value) and message in str(err.value), str(err.value)
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n"]
    proc = subprocess.run([*cmd, "--config", cases[0][0]], capture_output=True, text=True)
    _assert_refused(proc, cases[0][1])


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
    # Written with its record, as another run's job would (compare refuses a table of a recorded
    # run whose record it contradicts or lacks).
    from tilesweep.cells import write_cell_table

    write_cell_table(b / "tables" / "decode.csv", decode)
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


def _cell_rows_joined(work: Path, cell: str) -> tuple[list, list]:
    """Return one decode cell's job stamps as the cell holds them and as the table joined them."""
    rows = pd.read_csv(work / "results" / "decode" / f"{cell}.csv")
    table = pd.read_csv(work / "results" / "tables" / "decode.csv")
    joined = table[table["kernel"] == rows["kernel"].iloc[0]]
    joined = joined[joined["runner"].isin(rows["runner"])]
    return sorted(rows["job_start_utc"]), sorted(joined["job_start_utc"])


def _failing_join(work: Path) -> subprocess.CompletedProcess:
    """Run the sweep with the tables step failing mid-way (a planted fault); return it."""
    env = {
        **os.environ,
        "TILESWEEP_PLUGINS": "plugins.planted_faults",
        "TILESWEEP_FAULT_JOIN": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--cores", "2"]
    cmd += ["--config", 'overrides=["experiment=tiny"]']
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)


@pytest.mark.slow
def test_a_restored_join_is_rejoined_and_no_row_is_lost(swept):
    """Issue 41's data loss: a rebuilt cell, then a failing join whose previous tables Snakemake
    restores (newer by mtime than the cell). The next run rejoins, since the tables record the
    content key of the cells they joined; the same holds for an older join put back by hand
    after a healthy run (Snakemake's params then match: only the content key can tell)."""
    work, rows = swept
    cell = "bf16-m16n64k64-s2-w4-default"
    tables = work / "results" / "tables"
    older = {p.name: p.read_bytes() for p in tables.iterdir() if p.is_file()}
    drawn = ["plots/pareto.png", "plots/pareto.png.sum", "report.md", "report.md.sum"]
    older_report = {rel: (work / "results" / rel).read_bytes() for rel in drawn}
    (work / "results" / "decode" / f"{cell}.csv").unlink()
    failed = _failing_join(work)
    assert failed.returncode != 0 and "planted fault in the tables step" in failed.stderr
    # The job's error is one line naming the cause and its log, which holds the trace.
    log = work / "results" / "logs" / "tables.log"
    assert "unexpected error, RuntimeError: planted fault in the tables step" in failed.stderr
    assert f"the full trace: {log.relative_to(work)})" in failed.stderr
    assert "Traceback" not in failed.stderr + failed.stdout
    assert "Traceback" in log.read_text()
    assert "Restored previous version of results/tables/decode.csv" in failed.stderr
    # Snakemake put back every table the failed join had begun to replace (update()).
    assert {p.name: p.read_bytes() for p in tables.iterdir() if p.is_file()} == older
    assert _rows(work) == rows
    cell_rows, joined = _cell_rows_joined(work, cell)
    assert cell_rows != joined  # the restored table holds the cell's old rows
    snakemake(work, "--cores", "2", overrides=TINY)
    assert _cell_rows_joined(work, cell)[0] == _cell_rows_joined(work, cell)[1]
    assert _rows(work) == rows
    # An older join put back after a healthy run, newer by mtime than every cell.
    for name, data in older.items():
        (tables / name).write_bytes(data)
    assert _cell_rows_joined(work, cell)[0] != _cell_rows_joined(work, cell)[1]
    plan = snakemake(work, "-n", overrides=TINY)
    assert "results/tables/provenance.json: joined from other contents" in plan.stderr
    snakemake(work, "--cores", "2", overrides=TINY)
    assert _cell_rows_joined(work, cell)[0] == _cell_rows_joined(work, cell)[1]
    assert _rows(work) == rows
    # An older figure and report put back: drawn from other tables than these, they are redrawn.
    for rel, data in older_report.items():
        (work / "results" / rel).write_bytes(data)
    plan = snakemake(work, "-n", overrides=TINY)
    for rel in ("plots/pareto.png", "report.md"):
        assert f"results/{rel}: joined from other contents" in plan.stderr
    snakemake(work, "--cores", "2", overrides=TINY)
    # Redrawn: the report's record names the tables it is drawn from now (its text may read the
    # same where the rebuilt cell's one CPU timing rounds alike).
    for rel in ("plots/pareto.png.sum", "report.md.sum"):
        assert (work / "results" / rel).read_bytes() != older_report[rel], rel
    assert "Nothing to be done" in snakemake(work, "-n", overrides=TINY).stdout


@pytest.mark.slow  # runs snakemake
def test_a_dry_run_writes_nothing(tmp_path):
    """`snakemake -n` makes no results folder, no lock file and no ledger."""
    snakemake(tmp_path, "-n", overrides=TINY)
    assert not (tmp_path / "results").exists()


# Issue 41's plan-time attacks, each an override: refused in one line naming the key.
def _figure(**change: str) -> str:
    """Return an override giving one inline engine figure (references=none, as the tiny
    experiment has it), with `change` over a valid one."""
    fig = {
        "engine": "SGLang",
        "version": "'1'",
        "model": "deepseek_v3",
        "hardware": "h200",
        "deployment": "fp8_all",
        "layout": "{tp:8,pp:1,ep:1}",
        "batch": "8",
        "context_len": "1536",
        "speculative": "none",
        "tpot_ms": "12.8",
        "source": "a",
    }
    fig.update(change)
    if "input_len" in change:
        del fig["context_len"]
    return "references.figures=[{" + ",".join(f"{k}:{v}" for k, v in fig.items()) + "}]"


PLAN_REFUSED = [
    ("device=h200x100000000000000000000", "the GPU count must be at least 1 and at most 1024"),
    ("hardware=[h200,b200]", "hardware=[h200,b200]: a hardware option is one name, not a list"),
    ("model=[glm5,deepseek_v3]", "model=[glm5,deepseek_v3]: a model option is one name"),
    ("deployment.fit_file=docs/examples/h200/ceilings.json", "fit_file='docs/examples/h200/ceil"),
    ("deployment.fit_file=conf/config.yaml", "deployment.fit_file='conf/config.yaml': not JSON"),
    ("deployment.fit_file=docs/examples/h200/decode.csv", "decode.csv': not JSON"),
    ("deployment.fit_file=docs/examples/h200/question.json", "question.json': not a fit"),
    ("deployment.fit_file=/etc/passwd", "fit_file='/etc/passwd': outside the checkout"),
    ("deployment.fit_file=../../../../etc/hostname", "hostname': outside the checkout"),
    ("deployment.fit_file=no/such/fit.json", "fit_file='no/such/fit.json': no such file"),
    ("deployment.attention_table=conf/config.yaml", "config.yaml': not a CSV table"),
    ("deployment.attention_table=docs/examples/h200/decode.csv", "not an attention table"),
    ("deployment.attention_table=/etc/hostname", "attention_table='/etc/hostname': outside"),
    ("bench.kernel_timeout_s=1e10", "bench.kernel_timeout_s=10000000000.0: must be more than 0"),
    ("bench.kernel_timeout_s=1e300", "bench.kernel_timeout_s=1e+300: must be more than 0"),
    ("bench.step_runner=triton:nonexistent", "bench.step_runner='triton:nonexistent': no such"),
    ("grid.layouts=[{tp:128,pp:1,ep:1}]", "grid.layouts[0].tp=128: does not divide model.atten"),
    ("question.model=nosuch", "question.model='nosuch': unknown model; valid: deepseek_v3"),
    (_figure(layout="{tp:3,pp:1,ep:1}"), "references.figures[0].layout.tp=3: does not divide"),
    ("references.figures.0.tpot_ms=1", "references.figures.0.tpot_ms=1: the figures are read from"),
    ("+backend.fused_moe.engine_versions.evil=x", "engine_versions.evil: unknown engine"),
    ("results_dir=" + "r" * 300, "results_dir=rrr"),
    # Round four: a sweep never writes into the checkout's own or kept files.
    ("results_dir=", "results_dir='': empty"),
    ("results_dir=.", "results_dir=.: the checkout or one of its tracked folders"),
    ("results_dir=conf", "results_dir=conf: the checkout or one of its tracked folders"),
    ("results_dir=docs/examples/h200", "results_dir=docs/examples/h200: the checkout or one"),
    ("results_dir=results/../src", "results_dir=results/../src: the checkout or one"),
    ("results_dir=README.md/sub", "below the file"),
    ("grid.layouts=[{tp:4,pp:1,ep:1,moe_tp:3}]", "grid.layouts[0].moe_tp=3: does not divide"),
    # Figures beyond any GPU, names no kernel knows, formats the checkpoint does not have.
    ("hardware.memory_bandwidth_gbs=1e-300", "outside any GPU's range [1, 100000]"),
    ("+hardware.peak_tflops.fp16x=100", "'fp16x' is not one of bf16"),
    ("hardware.smem_per_block_default=1000000000", "shared memory must order default <= optin"),
    ("engine.host.ms=1e300", "engine.host.ms=1e+300: must be between 0 and 1,000"),
    (_figure(tpot_ms="1e-300"), "references.figures[0].tpot_ms=1e-300"),
    (_figure(input_len="1024", output_len="0"), "references.figures[0].input_len"),
    # Hydra's parse errors, named by the override and the form it takes.
    ("deployment.batches=[1,2", "override 'deployment.batches=[1,2': not key=value as Hydra"),
    ("deployment..batches=[1]", "override 'deployment..batches=[1]': not key=value"),
    ("{", "override '{': not key=value"),
    ("=", "override '=': no key before '='"),
    ("hardware.cc=90", "hardware.cc=90: sm_120 is compute capability 120"),
    # Round four's replay: absurd values that reached the answer unchecked.
    ("hardware.arch=sm_999", "hardware.arch=sm_999: not an architecture"),
    ("results_dir=/", "results_dir=/: / is a file system's root"),
    ("deployment.kernel_gap_us=1e300", "deployment.kernel_gap_us=1e+300: must be between 0 and"),
    ("hardware.grouped_gemm_efficiency.nvfp4.points.0.low=1e-300", "must be between 0.001 and 1"),
    (_figure(batch="1000000000000"), "references.figures[0].batch=1000000000000"),
]


@pytest.mark.parametrize(
    ("override", "message"), fast_sample(PLAN_REFUSED), ids=[o[:60] for o, _ in PLAN_REFUSED]
)
def test_a_bad_plan_is_refused_in_one_line(override, message):
    """Each is planned as the Snakefile plans it (Sweep), which turns a ConfigError into its one
    line; any other exception would be a traceback, and fails here."""
    from tilesweep.pipeline import Sweep

    # The tiny experiment cites no engine figures: an indexed figure's override needs the corpus.
    cited = ["references=published"] if override.startswith("references.figures.") else []
    with pytest.raises(ConfigError) as err:
        Sweep([*TINY, *cited, "device=cpu", override], ROOT / "conf")
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def test_a_deployment_file_outside_is_read_only_when_asked(tmp_path):
    """A fit outside the checkout and results_dir is refused, and read with read_outside=true."""
    from tilesweep.pipeline import Sweep

    fit = tmp_path / "fit.json"
    fit.write_bytes((ROOT / "docs" / "examples" / "h200" / "fit.json").read_bytes())
    with pytest.raises(ConfigError, match="outside the checkout and results_dir"):
        Sweep([*TINY, "device=cpu", f"deployment.fit_file={fit}"], ROOT / "conf")
    sweep = Sweep([*TINY, "device=cpu", f"deployment.fit_file={fit}", "read_outside=true"], None)
    assert sweep.shipped_fit() == [str(fit)]
    inside = Sweep(
        [*TINY, "device=cpu", f"results_dir={tmp_path}", f"deployment.fit_file={fit}"], None
    )
    assert inside.shipped_fit() == [str(fit)]


HARDWARE_FILES = [
    ("name: h200\narch: [sm_90\n", "h200.yaml, line 2: not valid YAML"),
    (bytes(range(256)) * 4, "h200.yaml"),
    ("name: h200\narch: ${nosuch}\n", "h200.yaml"),
    ("[1, 2, 3]\n", "hardware[h200]"),
]


@pytest.mark.parametrize(("text", "message"), HARDWARE_FILES, ids=["yaml", "binary", "ref", "list"])
def test_a_broken_hardware_file_is_one_line_naming_it(tmp_path, text, message):
    """A hardware file that is not YAML, is binary, names a missing interpolation or is not a
    mapping: one line naming it, whichever hardware the sweep plans for."""
    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    target = conf / "hardware" / "h200.yaml"
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as err:
        compose(["hardware=b200"], conf)
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def test_a_hardware_file_naming_another_gpu_is_refused(tmp_path):
    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    target = conf / "hardware" / "h200.yaml"
    target.write_text(target.read_text().replace("name: h200", "name: b200", 1))
    with pytest.raises(ConfigError, match=r"hardware\[h200\].name='b200': differs from its file"):
        compose([], conf)


def test_a_repeated_reference_figure_is_refused(tmp_path):
    from omegaconf import OmegaConf

    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    path = conf / "references" / "corpus" / "published.yaml"
    refs = OmegaConf.to_container(OmegaConf.load(path))
    refs["figures"].append(dict(refs["figures"][0], source="elsewhere"))
    path.write_text(OmegaConf.to_yaml(refs))
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    assert f"references.figures[{len(refs['figures']) - 1}]: repeats references.figures[0]" in (
        str(err.value)
    )


def test_an_empty_references_file_and_a_crawling_collective_are_refused(tmp_path):
    """An empty references file is not 'no figures' (references=none is); a collective's bus
    bandwidth below any link's (1e-300 GB/s) is refused, naming the figure."""
    import yaml

    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "references" / "published.yaml").write_text("")
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    assert "references: the file holds no `figures:` list" in str(err.value)
    (conf / "references" / "published.yaml").unlink()
    shutil.copy(ROOT / "conf/references/none.yaml", conf / "references" / "published.yaml")
    path = conf / "hardware" / "rtx_pro_6000.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["interconnect_model"]["topologies"]["switch"]["all_reduce"]["by_gpus"][8]["busbw_gbs"] = (
        1e-300
    )
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    assert "by_gpus.8.busbw_gbs=1e-300: must be between 0.1 and" in str(err.value)


def test_an_engine_kernel_on_an_unlisted_architecture_is_refused(tmp_path):
    """An engine file's `only_arch` naming an architecture conf/architectures.yaml lacks would
    never launch anywhere: refused in one line naming the kernel."""
    import yaml

    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    path = conf / "engine" / "sglang.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["families"]["mla_dsa_moe"]["per_layer"][0]["only_arch"] = ["sm_999"]
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    assert "engine.families.mla_dsa_moe.per_layer[0].only_arch=sm_999: not an" in str(err.value)


def _snakemake_config(work: Path, *config: str, dry: bool = True) -> subprocess.CompletedProcess:
    """Run snakemake with raw `--config` items; return the finished process."""
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--cores", "1"]
    cmd += ["-n"] if dry else []
    return subprocess.run([*cmd, "--config", *config], capture_output=True, text=True, cwd=work)


COMMAND_REFUSED = [
    (('override=["experiment=tiny"]',), "not a --config key; valid: overrides, example, device"),
    (("results_dir=elsewhere",), "results_dir='elsewhere': not a --config key; write overrides="),
    (("max_jobs=1",), "max_jobs=1: not a --config key; write overrides='[\"max_jobs=1\"]'"),
    (("example=[1]",), "example=['1']: expected one string"),
    (("device=h200x100000000000000000000",), "the GPU count must be at least 1 and at most 1024"),
]


def _plan_config(*entries: str) -> None:
    """Plan `--config ENTRIES` in this process as the Snakefile plans it: the entries read as
    Snakemake reads them, checked, then the overrides (the device's first) composed by Sweep."""
    from snakemake.cli import parse_config

    from tilesweep.command_config import check_command_config, parse_overrides
    from tilesweep.pipeline import Sweep

    config = parse_config(list(entries))
    check_command_config(config)
    planned = [f"device={config['device']}"] if "device" in config else []
    Sweep(planned + parse_overrides(config.get("overrides")), ROOT / "conf")


@pytest.mark.slow  # runs snakemake
def test_bad_config_keys_are_refused_in_one_line(tmp_path):
    """Each is planned as the Snakefile plans it; snakemake itself refuses the first (and, in
    test_bad_command_line_values_are_refused_in_one_line, another) before any job."""
    for config, message in COMMAND_REFUSED:
        with pytest.raises(ConfigError) as err:
            _plan_config(*config)
        assert "\n" not in str(err.value) and message in str(err.value), str(err.value)
    proc = _snakemake_config(tmp_path, *COMMAND_REFUSED[0][0])
    _assert_refused(proc, COMMAND_REFUSED[0][1])
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # runs snakemake
def test_an_unwritable_results_dir_is_refused_in_one_line(tmp_path):
    for where, message in [
        ("/proc/1/results", "results_dir=/proc/1/results: cannot write the sweep's lock there"),
        ("r" * 300, "results_dir=rrr"),
    ]:
        # A dry run writes no lock, so the lock's folder is refused by a real run only.
        dry = not where.startswith("/proc")
        proc = _snakemake_config(
            tmp_path, f'overrides=["experiment=tiny","results_dir={where}"]', dry=dry
        )
        _assert_refused(proc, message)


@pytest.mark.slow  # runs snakemake
def test_an_unreadable_rebuild_ledger_is_one_line(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / ".rebuilds.json").write_text("{not json")
    proc = snakemake(tmp_path, "-n", overrides=TINY, check=False)
    _assert_refused(proc, "results/.rebuilds.json: unreadable; delete it")


def test_the_command_line_tools_refuse_bad_files(tmp_path, capsys):
    """compare's --out and ceilings, failed's records and engine-check's files: one line each,
    or (a missing --out folder, a build record that is not one) handled."""
    run = tmp_path / "run"
    (run / "tables").mkdir(parents=True)
    (run / "device").mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["compare", str(run), str(run), "--out", str(a_file)], f"--out={a_file}: a file"),
        (["compare", str(run), str(run), "--out", "o" * 5000], "cannot write there"),
    ]
    for argv, message in cases:
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert cli(["compare", str(run), str(run), "--out", str(tmp_path / "new" / "folder")]) == 0
    assert (tmp_path / "new" / "folder" / "changes.csv").exists()
    capsys.readouterr()
    for ceilings, message in [
        ("[1, 2]", "ceilings.json: not a JSON object (a list)"),
        ('{"matmul_tflops": [1, 2]}', "matmul_tflops=[1, 2]: not a mapping"),
    ]:
        (run / "device" / "ceilings.json").write_text(ceilings)
        assert cli(["compare", str(run), str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    (run / "device" / "ceilings.json").unlink()
    build = run / "build" / "triton" / "sm_90" / "k"
    build.mkdir(parents=True)
    for record in ("[1, 2]", '"text"', '{"cells": 5}'):
        (build / "build.json").write_text(record)
        assert cli(["failed", str(run)]) == 0
        assert str(build / "build.json") in capsys.readouterr().out
    engine_file = tmp_path / "E=8,N=128,device_name=NVIDIA_H200.json"
    engine_file.write_text("[1, 2]")
    for argv in (["engine-check", str(engine_file)], ["engine-tune", "--out", str(tmp_path / "t"),
                                                       "--extra", str(engine_file)]):  # fmt: skip
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "a JSON list; expected {batch M: config}" in err, err


def test_engine_check_names_a_bad_engine_before_asking_for_a_gpu(tmp_path, capsys):
    """`engine-check FILE --engine nosuch`: the bad argument is the one line, on any machine
    (it was refused for "no GPU" first; round four's C338)."""
    engine_file = tmp_path / "E=8,N=128,device_name=NVIDIA_H200.json"
    engine_file.write_text('{"1": {"BLOCK_SIZE_M": 16}}')
    assert cli(["engine-check", str(engine_file), "--engine", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err == "tilesweep: --engine nosuch: not in backend.fused_moe.engine_versions\n", err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"per_kernel_us": 1.0, "groups": {', "not JSON"),
        ("[1, 2, 3]", "not a fit (a JSON list, not an object)"),
        ('{"gap": "no GPU at hand"}', "holds no fit, only why none was made (no GPU at hand)"),
        ('{"per_kernel_us": [1], "groups": {}, "device": "x"}', "not a fit: per_kernel_us"),
        (
            '{"per_kernel_us": 1e999, "groups": {}, "device": "x"}',
            "per_kernel_us: Input should be a finite",
        ),
    ],
    ids=["corrupt", "list", "gap", "cost-list", "cost-inf"],
)
def test_a_fit_file_that_is_not_a_fit_is_refused(tmp_path, text, message):
    """A fit file in results_dir (allowed there) that is corrupt, a list, a CPU run's gap or a
    fit with an unusable cost: refused in one line before any job, not a traceback in one."""
    from tilesweep.pipeline import Sweep

    fit = tmp_path / "fit.json"
    fit.write_text(text)
    with pytest.raises(ConfigError) as err:
        Sweep([*TINY, "device=cpu", f"results_dir={tmp_path}", f"deployment.fit_file={fit}"], None)
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def _tracked_state() -> str:
    """Return git's view of the tracked files (a data loss shows as a change)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout


TOOL_CASES = [
    (["tools/engine_tables.py", "--out", "docs/examples/h200/engine_tables", "--budget-s", "1"],
     "inside the checkout's tracked files"),
    (["tools/engine_tables.py", "--out", "OUT", "--engine", "nosuch"], "--engine='nosuch'"),
    (["tools/engine_tables.py", "--out", "OUT", "--shape", "abc"], "--shape='abc'"),
    (["tools/engine_tables.py", "--out", "OUT", "--format", "nosuch"], "--format='nosuch'"),
    (["tools/engine_tables.py", "--out", "OUT", "--from", "/nonexistent"], "not a folder"),
    (["tools/engine_tables.py", "--out", "OUT", "--budget-s", "-1"], "must be a finite number"),
    (["tools/engine_tables.py", "--out", "OUT", "hardware=nosuch"], "unknown hardware"),
    (["tools/engine_tables.py", "--out", ""], "--out='': empty"),
    (["tools/tune_summary.py", "docs/examples/h200/tune_work", "--csv",
      "docs/examples/h200/layout.csv"], "inside the checkout's tracked files"),
    (["tools/tune_summary.py", "docs/examples/h200/tune_work", "--csv", "docs"], "a folder"),
    (["tools/tune_summary.py", "OUT"], "no tune tables under"),
    (["tools/check_transfer.py"], "usage:"),
    (["tools/check_transfer.py", "docs/examples/h200/fit.json",
      "docs/examples/h200/layout_deepseek_v3.csv", "docs/examples/h200/ceilings.json",
      "docs/examples/h200/check.csv", "model=deepseek_v3"], "inside the checkout's tracked"),
    (["tools/check_transfer.py", "docs/examples/h200/ceilings.json",
      "docs/examples/h200/layout_deepseek_v3.csv", "docs/examples/h200/ceilings.json",
      "OUT/x.csv"], "not a launch-aware fit"),
    (["tools/check_transfer.py", "docs/examples/h200/fit.json",
      "docs/examples/h200/decode.csv", "datasheet", "OUT/x.csv"], "not a whole-step table"),
    # h200_mla_tune checks its output before minutes of tuning (it checked at the first write).
    (["tools/h200_mla_tune.py", "docs/examples/h200"], "a folder, where a file goes"),
    (["tools/h200_mla_tune.py", ""], "out='': empty"),
    (["tools/h200_mla_tune.py", "docs/examples/h200/decode.csv"], "inside the checkout's tracked"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"), TOOL_CASES, ids=[" ".join(a)[:70] for a, _ in TOOL_CASES]
)
def test_a_tool_refuses_bad_arguments_in_one_line_and_keeps_kept_files(
    tmp_path, argv, message, monkeypatch, capsys
):
    """The drop-in and example tools: a bad argument or a kept file as the output is one line
    (no traceback), and no tracked file changes. Each runs as `python tools/X.py` runs it (its
    `__main__`, from the checkout), in this process: an exception other than its refusal would
    end the test here as it would print a traceback there."""
    import runpy
    import sys

    before = _tracked_state()
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        runpy.run_path(argv[0], run_name="__main__")
    out, err = capsys.readouterr()
    assert done.value.code not in (0, None), out
    assert err.count("\n") == 1 and message in err, err
    assert _tracked_state() == before


def test_tune_summary_names_a_table_that_is_not_text(tmp_path):
    """C264/C265: a tune table of bytes that are not UTF-8 is one line naming the file and
    saying it is not text, never a bare UnicodeDecodeError."""
    import sys

    (tmp_path / "tune_bf16.csv").write_bytes(b"\x00\xa9\xff\xfe binary\n")
    proc = subprocess.run([sys.executable, "tools/tune_summary.py", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{tmp_path / 'tune_bf16.csv'}: not text" in proc.stderr
    assert "UnicodeDecodeError" not in proc.stderr


def _archive(tmp_path: Path, drop: str = "", junk: str = "") -> Path:
    """Return a results.tgz made from the kept example's tables, less or with one damaged."""
    import tarfile

    base = tmp_path / "r" / "results"
    (base / "tables").mkdir(parents=True)
    (base / "device").mkdir()
    kept = ROOT / "docs" / "examples" / "h200"
    for name in ("launch", "decode", "collective", "layout", "power"):
        if name != drop:
            shutil.copy(kept / f"{name}.csv", base / "tables" / f"{name}.csv")
    if junk:
        (base / "tables" / f"{junk}.csv").write_text("junk,launch\n")
    shutil.copy(kept / "ceilings.json", base / "device" / "ceilings.json")
    path = tmp_path / f"r{drop}{junk}.tgz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(base, arcname="results")
    return path


IMPORT_REFUSED = [
    ("missing", "no such file"),
    ("no-power", "no power table"),
    ("junk", "has no rows"),
    ("not-tar", "not a gzipped tar archive"),
    ("bad-override", "import_example:"),
]


# Each runs the script (bash, then this Python): the fast tier runs three of the five.
@pytest.mark.parametrize(("how", "message"), fast_sample(IMPORT_REFUSED, every=2))
def test_import_example_checks_everything_before_it_touches_the_example(tmp_path, how, message):
    """A bad archive or override leaves the kept example as it was, in one line (it used to
    copy tables over the kept ones before it checked them)."""
    tgz = {
        "missing": tmp_path / "none.tgz",
        "no-power": _archive(tmp_path, drop="power") if how == "no-power" else None,
        "junk": _archive(tmp_path, junk="power") if how == "junk" else None,
        "not-tar": ROOT / "README.md",
        "bad-override": _archive(tmp_path) if how == "bad-override" else None,
    }[how]
    extra = ['a"b: [x'] if how == "bad-override" else []
    before = _tracked_state()
    env = {**os.environ, "PYTHON": sys.executable}  # a checkout without .venv: this Python
    proc = subprocess.run(["bash", "tools/import_example.sh", str(tgz), "docs/examples/h200",
                           *extra], cwd=ROOT, capture_output=True, text=True, env=env)  # fmt: skip
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert _tracked_state() == before


def test_compare_and_failed_see_what_replaced_a_record(tmp_path, tiny_sweep, capsys):
    """A folder or a pipe where compare reads a table is one line (a pipe never blocks it);
    failed names a dangling link, a pipe and a stage's folder replaced by a file."""
    b = tmp_path / "b"
    shutil.copytree(tiny_sweep / "results", b, symlinks=True)
    table = b / "tables" / "decode.csv"
    table.unlink()
    table.mkdir()
    assert cli(["compare", str(tiny_sweep / "results"), str(b)]) == 2
    assert "not a plain file" in capsys.readouterr().err
    table.rmdir()
    os.mkfifo(table)
    assert cli(["compare", str(tiny_sweep / "results"), str(b)]) == 2
    assert "not a plain file" in capsys.readouterr().err
    record = next((b / "decode").rglob("*.csv"))
    record.unlink()
    record.symlink_to(tmp_path / "nothing.csv")
    fifo = next((b / "collective").rglob("*.csv"))
    fifo.unlink()
    os.mkfifo(fifo)
    shutil.rmtree(b / "power")
    (b / "power").write_text("x")
    assert cli(["failed", str(b)]) == 0
    out = capsys.readouterr().out
    assert str(record) in out and str(fifo) in out and str(b / "power") in out, out
    assert cli(["failed", str(b), "--status", "ok"]) == 2
    assert "a settled status, not a failure" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("overrides: 5\n", "must hold `overrides:`, a list of strings"),
        ("overrides: [x\n", "not YAML"),
    ],
)
def test_a_damaged_example_overrides_file_is_one_line(tmp_path, text, message):
    from tilesweep.report_paths import example_overrides

    (tmp_path / "overrides.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        example_overrides(str(tmp_path))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_cited_figure_whose_engine_lacks_its_family_is_refused_at_plan_time(tmp_path):
    """A GLM-5 figure credited to TensorRT-LLM, in a conf whose tensorrtllm file lacks the
    mla_dsa_moe list, is refused when the config is composed, not a traceback in the verdict's
    job."""
    from omegaconf import OmegaConf

    from tilesweep.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    engine = conf / "engine" / "tensorrtllm.yaml"
    spec = OmegaConf.to_container(OmegaConf.load(engine))
    del spec["families"]["mla_dsa_moe"]
    engine.write_text(OmegaConf.to_yaml(spec))
    path = conf / "references" / "corpus" / "published.yaml"
    refs = OmegaConf.to_container(OmegaConf.load(path))
    # A figure composed by its engine's own file: one naming another (engine_config, such as
    # sglang_dsa_unfused) would compose with that file whatever its engine says.
    first = next(
        i
        for i, f in enumerate(refs["figures"])
        if f["model"] == "glm5" and not f.get("engine_config")
    )
    refs["figures"][first]["engine"] = "TensorRT-LLM"
    path.write_text(OmegaConf.to_yaml(refs))
    with pytest.raises(ConfigError) as err:
        compose(["references=published"], conf)
    assert f"references.figures[{first}].engine='TensorRT-LLM'" in str(err.value)
    assert "no kernel list for the mla_dsa_moe family of glm5" in str(err.value)
    # A figure credited to one engine but composed with another's file is refused too, not
    # composed with the other engine's kernel lists under its name.
    named = next(i for i, f in enumerate(refs["figures"]) if f.get("engine_config"))
    refs["figures"][named]["engine"] = "TensorRT-LLM"
    path.write_text(OmegaConf.to_yaml(refs))
    with pytest.raises(ConfigError) as err:
        compose(["references=published"], conf)
    config = refs["figures"][named]["engine_config"]
    assert str(err.value).startswith(f"references.figures[{named}].engine_config={config!r}: ")
    assert "not a file of TensorRT-LLM" in str(err.value)
