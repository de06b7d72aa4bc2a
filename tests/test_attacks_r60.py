"""Issue 50, round nine (session 60): the classes its fresh cases found, each a test (fast tier).
An engine file's own grouped-GEMM curve under a GPU or format nothing reads; an engine file only a
cited figure composes with, damaged; `deployment.attention=dsa` on a model with no sparse indexer;
a topology named twice among the plausible; an output file at the checkout's root that git
tracks; the probes' and the curve tool's arguments and OUT checked before anything runs."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tilesweep.config import compose
from tilesweep.errors import ConfigError
from tilesweep.io import check_out_file, check_out_folder

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
RELEASE = ["engine=sglang_0_4", "hardware=h200", "deployment=fp8_all", "model=deepseek_v3"]


def _conf_with(tmp_path: Path, name: str, edit) -> Path:
    """Return a copy of conf/ whose file `name` (under conf/) `edit` changed (its YAML data)."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    path = conf / name
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return conf


def _refused(overrides: list[str], conf: Path) -> str:
    """Return the one line compose refuses the overrides with."""
    with pytest.raises(ConfigError) as err:
        compose(overrides, conf)
    line = str(err.value)
    assert "\n" not in line and "Traceback" not in line, line
    return line


def _rename(mapping: dict, old: str, new: str) -> None:
    """Rename a key of a mapping in place."""
    mapping[new] = mapping.pop(old)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            lambda g: _rename(g, "h200", "h2000"),
            "engine.grouped_gemm_efficiency='h2000': not a GPU of conf/hardware (valid: a100, ",
        ),
        (
            lambda g: _rename(g, "h200", "H200"),
            "engine.grouped_gemm_efficiency='H200': not a GPU of conf/hardware",
        ),
        (
            lambda g: _rename(g["h200"], "fp8", "fp9"),
            "engine.grouped_gemm_efficiency.h200='fp9': 'fp9' is not a weight dtype (bf16, fp8,",
        ),
        (
            lambda g: _rename(g["h100"], "fp8", "fp8_block"),
            "engine.grouped_gemm_efficiency.h100='fp8_block': 'fp8_block' is not a weight dtype",
        ),
    ],
    ids=["unknown-gpu", "gpu-capitalised", "unknown-format", "format-misnamed"],
)
def test_an_engine_curve_nothing_would_read_is_refused(tmp_path, edit, said):
    """A release's own curve under a GPU name no hardware file has, or a format no weight has,
    was never read: the verdict took the hardware file's curve without a word (0.713 of the
    datasheet where the release's own kernel reached 0.47-0.79). Refused in one line."""
    conf = _conf_with(
        tmp_path, "engine/sglang_0_4.yaml", lambda d: edit(d["grouped_gemm_efficiency"])
    )
    assert said in _refused(RELEASE, conf)


def test_an_engine_file_a_cited_figure_composes_with_is_checked_when_composed(tmp_path):
    """vllm_0_7 is read only by the cited figures that name it (engine_config): a damaged curve
    there passed the plan and failed in the engines' job (or, in `tilesweep verdict`, under the
    chosen engine's name). Now refused when any config is composed, naming the file."""

    def inverted(data: dict) -> None:
        data["grouped_gemm_efficiency"]["h200"]["fp8"]["points"][0]["low"] = 0.99

    conf = _conf_with(tmp_path, "engine/vllm_0_7.yaml", inverted)
    line = _refused(["references=published"], conf)
    assert line.startswith("conf/engine/vllm_0_7.yaml: engine.grouped_gemm_efficiency.h200.fp8")
    assert "points[0].low=0.99: above high=" in line
    conf = _conf_with(
        tmp_path / "2",
        "engine/vllm_0_7.yaml",
        lambda d: _rename(d["grouped_gemm_efficiency"], "h200", "h2000"),
    )
    assert _refused(["references=published"], conf).startswith(
        "conf/engine/vllm_0_7.yaml: engine.grouped_gemm_efficiency='h2000': not a GPU of"
    )
    compose(["references=none"], conf)  # no figure composes with it: not read, not refused


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=qwen3_235b_a22b", "hardware=h200", "deployment=fp8_all"],
        ["model=mixtral_8x7b", "hardware=h200", "deployment=bf16", "engine=vllm"],
    ],
)
def test_sparse_attention_on_a_model_without_an_indexer_is_refused(overrides):
    """deployment.attention=dsa on a GQA model ran its dense attention, labelled `dsa`."""
    line = _refused([*overrides, "deployment.attention=dsa"], ROOT / "conf")
    model = overrides[0].split("=")[1]
    assert line == (
        f"deployment.attention='dsa': model {model} has no sparse indexer "
        "(model.attention.index_topk): its attention is dense; give auto or dense"
    )
    compose([*overrides, "deployment.attention=dense"])  # what it runs: accepted
    compose(["deployment.attention=dsa"])  # glm5 has the indexer


def test_a_topology_named_twice_among_the_plausible_is_refused(tmp_path):
    def twice(data: dict) -> None:
        data["interconnect_model"]["plausible"] = ["switch", "dual_socket", "switch"]

    conf = _conf_with(tmp_path, "hardware/rtx_pro_6000.yaml", twice)
    line = _refused(["hardware=h200", "deployment=fp8_all"], conf)
    assert line.startswith("hardware[rtx_pro_6000].interconnect_model.plausible=")
    assert "names a topology twice; give each once" in line


@pytest.mark.parametrize("name", ["README.md", "Snakefile", "pyproject.toml"])
def test_an_output_file_at_the_checkouts_root_that_git_tracks_is_refused(name):
    """tools/check_transfer.py's OUT_CSV=README.md overwrote it: the root's own files were not
    among the tracked folders. --force writes only under docs/examples."""
    for force in (False, True):
        with pytest.raises(ConfigError, match="tracked files") as err:
            check_out_file(str(ROOT / name), force=force, flag="OUT_CSV")
        assert str(err.value).startswith(f"OUT_CSV={ROOT / name}: inside the ")
    with pytest.raises(ConfigError, match="tracked files"):  # as a folder: refused, untouched
        check_out_folder(str(ROOT / name), flag="OUT")


def test_an_untracked_output_file_at_the_root_is_written():
    """A new file at the checkout's root (not tracked) is the user's to write."""
    assert check_out_file(str(ROOT / "summary_r60_not_there.csv")) == ROOT / (
        "summary_r60_not_there.csv"
    )


def _tool(tmp_path: Path, script: str, *args: str, out: str | None = None):
    """Run tools/<script> from tmp_path; return the finished process."""
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = out
    cmd = [sys.executable, str(ROOT / "tools" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def _one_line(proc: subprocess.CompletedProcess, name: str) -> str:
    """Return a refused tool's one line, checking exit 2 and no trace."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: "), proc.stderr
    assert "Traceback" not in proc.stderr and "Error:" not in lines[0], proc.stderr
    return lines[0]


ROWS = str(ROOT / "docs" / "evidence" / "fused_moe_probe_h100.json")
CURVE_REFUSED = [
    (["/nonexistent", "--config", "H100"], "/nonexistent: no such file"),
    ([str(ROOT / "README.md"), "--config", "H100"], "not JSON (the probe's rows, a JSON list)"),
    ([ROWS, "--config", "H100", "--datasheet-gbs", "-1"], "--datasheet-gbs=-1: must be a fini"),
    ([ROWS, "--config", "H100", "--carry-to", "nan"], "--carry-to=nan: must be a finite number"),
    ([ROWS, "--config", "H100", "--fixed-us", "-5"], "--fixed-us=-5: must be a finite number at"),
    ([ROWS, "--config", "H100", "--fixed-us", "50"], "us, no more than 2 x --fixed-us=50: no ti"),
    ([ROWS, "--config", "H100", "--datasheet-gbs", "100"], "no fraction of a datasheet"),
]


@pytest.mark.parametrize(("args", "said"), CURVE_REFUSED)
def test_the_curve_tool_checks_its_rows_and_numbers(tmp_path, args, said):
    """fused_moe_curve printed points for a negative datasheet, a NaN target, a fixed cost longer
    than the call (negative or infinite fractions), and a raw error for a missing or non-JSON
    rows file."""
    assert said in _one_line(_tool(tmp_path, "fused_moe_curve.py", *args), "fused_moe_curve")


def test_the_curve_tool_names_rows_that_are_not_the_probes(tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"part": "up+down", "status": "ok", "config_device": "H100"}]))
    proc = _tool(tmp_path, "fused_moe_curve.py", str(rows), "--config", "H100")
    line = _one_line(proc, "fused_moe_curve")
    assert line.endswith("a up+down row lacks 'model'; not the probe's rows")


@pytest.mark.parametrize(
    ("script", "args", "said"),
    [
        ("dsa_indexer_probe.py", ["--batches", "x"], "--batches takes integers separated by"),
        ("dsa_indexer_probe.py", ["--repeats", "0"], "--batches 1-4096 each, --repeats at least 1"),
        ("fused_moe_probe.py", ["--models", "nosuch"], "--models takes glm5,deepseek_v3, not"),
    ],
)
def test_a_probe_checks_its_arguments_before_its_kernels_or_gpu(
    tmp_path, monkeypatch, capsys, script, args, said
):
    """Checked before the GPU is asked for and before the kernels are loaded (a bad one ran 78
    layers on the GPU first, or was hidden behind the missing kernels). The probe's main runs in
    this process (a process of its own imports torch again); the tests below run each probe as a
    user does, through tool_main."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    probe = importlib.import_module(script.removesuffix(".py"))
    monkeypatch.setattr(sys, "argv", [script, *args])
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.chdir(tmp_path)
    try:
        code = probe.main()
    except SystemExit as exc:  # sys.exit(line): Python prints the line, exit 1
        code = exc.code
    line = code if isinstance(code, str) else capsys.readouterr().err.strip()
    assert code not in (0, None) and said in line and "\n" not in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["dsa_indexer_probe.py", "release_gemm_probe.py"])
def test_a_probe_refuses_an_out_it_cannot_write_before_it_runs(tmp_path, script):
    """OUT naming a file: refused before the kernels ran (release_gemm_probe ran them all, then
    failed with FileExistsError, the rows lost)."""
    (tmp_path / "taken").write_text("keep\n")
    proc = _tool(tmp_path, script, out=str(tmp_path / "taken"))
    name = script.removesuffix(".py")
    assert _one_line(proc, name) == f"{name}: OUT={tmp_path / 'taken'}: a file, not a folder"
    assert (tmp_path / "taken").read_text() == "keep\n"


def test_a_probe_names_missing_kernels_in_one_line(tmp_path):
    """fused_moe_probe without the extracted kernels: their path and how to get them, not
    FileNotFoundError."""
    proc = _tool(tmp_path, "fused_moe_probe.py", out=str(tmp_path / "out"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "fused_moe_probe: no .engine_kernels/sglang-0.5.23/manifest.json here "
        "(fetch_engine_kernels --release)"
    )


def test_a_write_the_file_system_refuses_is_one_line_not_a_bug(monkeypatch, capsys):
    """`verdict --out` onto an immutable verdict.csv (chattr +i) ended in "unexpected error,
    PermissionError ... (a bug ...)": the file system's refusal, named with the file it refused."""
    from tilesweep import cli

    def refused(args):
        raise PermissionError(1, "Operation not permitted", "o/.verdict.csv.x.tmp", None, "o/v.csv")

    monkeypatch.setattr(cli, "verdict_command", refused)
    assert cli.main(["verdict", "--out", "o"]) == 1
    err = capsys.readouterr().err
    assert err == "tilesweep: o/v.csv: Operation not permitted (the file system refused)\n"


def test_a_hydra_deletion_after_an_option_is_an_override(monkeypatch):
    """`verdict --no-engines ~deployment.topology`: argparse left it unparsed and the command
    refused it as an unrecognised argument; it is an override, as `key=value` there is."""
    from tilesweep import cli

    seen = []
    monkeypatch.setattr(cli, "verdict_command", lambda args: seen.append(args.overrides) or 0)
    assert cli.main(["verdict", "--no-engines", "~deployment.topology", "hardware=h200"]) == 0
    assert seen == [["~deployment.topology", "hardware=h200"]]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            lambda d: d["kernel_floors"][0].update(only_arch=["sm_999"]),
            "kernel_floors[0].only_arch",
        ),
        (lambda d: _rename(d["allreduce"], "sm_90", "sm_99"), "engine.allreduce=sm_99: not an"),
        (lambda d: d["attention_by_arch"].update(sm_999="dense"), "attention_by_arch=sm_999: not"),
    ],
    ids=["floor", "allreduce", "attention"],
)
def test_an_engine_key_naming_no_architecture_is_refused(tmp_path, edit, said):
    """A kernel floor, an all-reduce table or an attention mode under an architecture
    conf/architectures.yaml lacks was never read (the kernels' own only_arch already refused)."""
    conf = _conf_with(tmp_path, "engine/sglang_0_4.yaml", edit)
    line = _refused(RELEASE, conf)
    assert said in line and "not an architecture conf/architectures.yaml lists" in line


@pytest.mark.parametrize("script", ["import_example.sh", "import_engine_tables.sh"])
def test_an_import_tool_without_the_projects_python_says_so_in_one_line(tmp_path, script):
    """In a checkout without .venv the import tools ran `python3`, which may lack pandas: a
    Python traceback (ModuleNotFoundError) reached the user. Now one line naming PYTHON."""
    import tarfile

    root = tmp_path / "root"
    (root / "tools").mkdir(parents=True)
    (root / "docs" / "examples" / "h200").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / script, root / "tools")
    stub = tmp_path / "nopython"
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(0o755)
    given = tmp_path / "given"
    (given / "tables" / "checks").mkdir(parents=True)
    (given / "tables" / "dropins.csv").write_text("file\n")
    (given / "tables" / "checks" / "c.csv").write_text("x\n")
    (given / "results" / "tables").mkdir(parents=True)
    with tarfile.open(given / "engine_tables.tgz", "w:gz") as tar:
        tar.add(given / "tables", "tables")
    with tarfile.open(given / "results.tgz", "w:gz") as tar:
        tar.add(given / "results", "results")
    (given / "tables.log").write_text("log\n")
    (given / "gpus.csv").write_text("name\nNVIDIA H200\n")
    args = [str(given)] if script == "import_engine_tables.sh" else [
        str(given / "results.tgz"), str(root / "docs" / "examples" / "h200"), "x=1"
    ]  # fmt: skip
    env = {**os.environ, "PYTHON": str(stub)}
    proc = subprocess.run(["bash", str(root / "tools" / script), *args], capture_output=True,
                          text=True, env=env, timeout=60)  # fmt: skip
    name = script.removesuffix(".sh")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == (
        f"{name}: {stub} cannot import pandas{', omegaconf and yaml' if 'example' in name else ''} "
        f"(no {root}/.venv): set PYTHON to the project's Python; nothing changed\n"
    )
    assert not (root / "docs" / "examples" / "h200" / "engine_tables").exists()
