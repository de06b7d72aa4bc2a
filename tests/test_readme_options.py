"""Every option value README.md lists for `hardware`, `model`, `engine` and `deployment`, alone
with the default others: `tilesweep verdict` prints the card or refuses in one line, and the
sweep's plan (Sweep, as the Snakefile builds it; `snakemake -n` for two of them) does the same,
before any job."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import ROOT, SNAKEMAKE

from tilesweep.cli import main as cli
from tilesweep.errors import ConfigError

GROUPS = ("hardware", "model", "engine", "deployment")


def readme_options() -> list[tuple[str, str]]:
    """Return (group, option) for every option the README's configuration table lists."""
    out = []
    for line in (ROOT / "README.md").read_text().splitlines():
        match = re.match(r"\| `(\w+)` \| (.*?) \|", line)
        if match and match.group(1) in GROUPS:
            out += [(match.group(1), o) for o in re.findall(r"`([\w.]+)`", match.group(2))]
    return out


OPTIONS = readme_options()


def test_the_readme_lists_options_for_every_group():
    assert {g for g, _ in OPTIONS} == set(GROUPS) and len(OPTIONS) >= 20


@pytest.mark.slow  # about 4 s an option
@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_each_readme_option_composes_or_is_refused_in_one_line(group, option, capsys):
    from tilesweep.pipeline import Sweep

    code = cli(["verdict", "--no-engines", f"{group}={option}"])
    out, err = capsys.readouterr()
    if code == 0:
        assert out.startswith("The answer: ") and "Traceback" not in err, (out, err)
        assert "Rests on: " in out and ("For: " in out or "no layout" in out.splitlines()[0])
    else:
        assert code == 2 and err.startswith("tilesweep: ") and err.count("\n") == 1, err
    try:
        Sweep(["device=cpu", f"{group}={option}"], ROOT / "conf")
    except ConfigError as exc:  # the sweep refuses what the command refuses, in its words
        if code == 0:  # only the sweep's own tile check, which the verdict (timing no tile) skips
            assert str(exc).startswith("grid.tiles"), str(exc)
        else:
            assert code == 2 and str(exc) in err, (str(exc), err)
    else:
        assert code == 0, err


@pytest.mark.slow  # runs snakemake
@pytest.mark.parametrize("override", ["engine=vllm", "hardware=h200"])
def test_snakemake_plans_or_refuses_a_readme_option_in_one_line(tmp_path, override):
    proc = subprocess.run(
        [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n",
         "--cores", "1", "--config", f'overrides=["{override}","device=cpu"]'],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if override == "hardware=h200":  # NVFP4 by default: Hopper has no FP4 tensor cores
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        refused = [line for line in proc.stderr.splitlines() if line.startswith("tilesweep: ")]
        assert len(refused) == 1 and "use deployment=fp8_all" in refused[0], proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_verdict_prints_a_top_n_and_a_pareto_frontier(capsys):
    assert cli(["verdict", "--no-engines", "--top", "3", "--pareto"]) == 0
    out = capsys.readouterr().out
    top = out[out.index("Top 3 by tokens/s per GPU at >= 20 tok/s per user:") :].splitlines()
    assert [line[:5] for line in top[1:4]] == ["  1. ", "  2. ", "  3. "]
    front = out[out.index("Pareto frontier") :].splitlines()[1:]
    users = [float(re.search(r"([\d.]+) tok/s per user", line).group(1)) for line in front]
    gpus = [float(re.search(r"([\d.]+) tok/s per GPU", line).group(1)) for line in front]
    assert users == sorted(users, reverse=True) and gpus == sorted(gpus) and len(front) >= 2
    assert cli(["verdict", "--no-engines", "--top", "-1"]) == 2
