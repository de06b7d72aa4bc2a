"""A derived option file (its `defaults` list) as Hydra composes it, and the faults of such a
file refused in one line before any job (issue 50, round four's fresh cases)."""

from __future__ import annotations

import shutil

import pytest
from conftest import ROOT

from tilesweep.config import compose, compose_groups
from tilesweep.errors import ConfigError
from tilesweep.group_files import group_file

B12X = "engine/sglang_b12x.yaml"


@pytest.fixture
def conf(tmp_path):
    """Return a copy of conf/ to damage."""
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    return tmp_path / "conf"


def _edit(conf, name: str, old: str, new: str) -> None:
    path = conf / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("  - sglang\n", "  - sglang_b12x\n", "defaults list loops (sglang_b12x -> sglang_b12x)"),
        ("  - sglang\n", "  - ../hardware/h200\n", "defaults entry '../hardware/h200' is not an"),
        ("only_arch: [sm_120]", "only_arch: [sm_999]", "engine.only_arch=sm_999: not an arch"),
    ],
)
def test_a_bad_derived_engine_file_is_one_line(conf, old, new, message):
    _edit(conf, B12X, old, new)
    with pytest.raises(ConfigError) as err:
        compose(["engine=sglang_b12x"], conf)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_loop_through_two_files_is_named_by_the_group_file_reader(conf):
    _edit(
        conf,
        "engine/sglang.yaml",
        "name: sglang",
        "defaults:\n  - sglang_b12x\n  - _self_\nname: sglang",
    )
    with pytest.raises(ConfigError, match="sglang_b12x -> sglang -> sglang_b12x"):
        group_file(conf, "engine", "sglang_b12x")


def test_an_engine_file_named_for_another_engine_is_refused(conf):
    """A copy of sglang_b12x.yaml edited but keeping its name would label its rows sglang_b12x."""
    text = (conf / B12X).read_text().replace("from_routed_pairs: 128", "from_routed_pairs: 9999")
    (conf / "engine" / "b12x_copy.yaml").write_text(text)
    for run in (
        lambda: compose(["engine=b12x_copy"], conf),
        lambda: compose_groups({"engine": "b12x_copy"}, (), conf),
    ):
        with pytest.raises(ConfigError, match="gives name='sglang_b12x'; an engine file's name"):
            run()


def test_an_edit_that_keeps_size_and_mtime_is_still_read(conf):
    """The per-process caches key a file by its bytes, not its mtime and size."""
    import os

    path = conf / B12X
    assert group_file(conf, "engine", "sglang_b12x")["untimed"][0]["from_routed_pairs"] == 128
    stat = path.stat()
    _edit(conf, B12X, "from_routed_pairs: 128", "from_routed_pairs: 256")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert group_file(conf, "engine", "sglang_b12x")["untimed"][0]["from_routed_pairs"] == 256


@pytest.mark.parametrize("order", ["  - _self_\n  - default\n", "  - default\n"])
def test_a_derived_file_reads_as_hydra_composes_it_wherever_self_stands(conf, order):
    """`_self_` before a base lets the base win (it was always merged last here, so a cited
    figure's deployment differed from the verdict's); no `_self_` is `_self_` last."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    _edit(conf, "deployment/fp8_all.yaml", "  - default\n  - _self_\n", order)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=["deployment=fp8_all"])
    hydra = OmegaConf.to_container(cfg.deployment, resolve=True)
    assert group_file(conf, "deployment", "fp8_all") == hydra
