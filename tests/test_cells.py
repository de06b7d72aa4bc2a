"""Per-cell records (cells.py) without Snakemake: what is damaged, what a join was made from,
and how the damaged outputs are named."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from tilesweep import cells
from tilesweep.errors import CellError, ConfigError
from tilesweep.sweep_lock import NAME, hold, probe


def _cell(folder, name: str, value: int) -> str:
    """Write a one-row cell table; return its path."""
    path = str(folder / name)
    cells.write_cell_table(path, pd.DataFrame({"x": [value]}))
    return path


def test_a_join_is_stale_once_a_cell_it_joined_holds_other_rows(tmp_path):
    a, b = _cell(tmp_path, "a.csv", 1), _cell(tmp_path, "b.csv", 2)
    joined = tmp_path / "joined.json"
    cells.write_cell_json(joined, {"measured": {}}, inputs=cells.content_key([a, b]))
    assert cells.stale_join(joined, [b, a]) is None  # order does not matter
    assert cells.stale_join(joined, [os.path.join(tmp_path, ".", "a.csv"), b]) is None
    _cell(tmp_path, "a.csv", 3)  # the cell is rebuilt with other rows; the join is not
    os.utime(joined)  # and the join is newer by mtime, as a restored one is
    path, why = cells.stale_join(joined, [a, b])
    assert path == str(joined) and "joined from other contents" in why
    cells.write_cell_json(joined, {"measured": {}}, inputs=cells.content_key([a, b]))
    assert cells.stale_join(joined, [a, b]) is None


def test_a_join_without_a_key_or_damaged_is_left_to_the_damage_check(tmp_path):
    a = _cell(tmp_path, "a.csv", 1)
    joined = tmp_path / "joined.json"
    cells.write_cell_json(joined, {"measured": {}})  # an older tilesweep's: no key
    assert cells.stale_join(joined, [a]) is None
    cells.write_cell_json(joined, {"measured": {}}, inputs="another key")
    joined.write_text("{}")
    assert cells.damage(joined) is not None and cells.stale_join(joined, [a]) is None


def test_the_content_key_reads_a_shipped_file_without_a_record(tmp_path):
    shipped = tmp_path / "fit.json"
    shipped.write_text("{}")
    key = cells.content_key([str(shipped)])
    shipped.write_text('{"a": 1}')
    assert cells.content_key([str(shipped)]) != key
    shipped.unlink()
    assert cells.content_key([str(shipped)]) not in (key, None)


def test_a_file_written_beside_a_cell_is_checked_with_it(tmp_path):
    (tmp_path / "kernel.cubin").write_bytes(b"\x7fELF")
    record = tmp_path / "build.json"
    cells.write_cell_json(record, {"binary": "kernel.cubin"}, files=["kernel.cubin"])
    assert cells.damage(record) is None
    (tmp_path / "kernel.cubin").write_bytes(b"\x7fELG")
    assert (
        cells.damage(record) == "kernel.cubin beside it differs from what its job wrote (SHA-256)"
    )
    (tmp_path / "kernel.cubin").unlink()
    assert cells.damage(record) == "kernel.cubin beside it is missing"


def test_parquet_figures_and_bytes_carry_records(tmp_path):
    table = tmp_path / "t.parquet"
    cells.write_cell_parquet(table, pd.DataFrame({"x": [1, 2]}))
    assert cells.damage(table) is None
    table.write_bytes(table.read_bytes()[:-3])
    assert "bytes where its job wrote" in cells.damage(table)
    png = tmp_path / "p.png"
    cells.write_cell_bytes(png, b"\x89PNG....")
    assert cells.read_cell_bytes(png) == b"\x89PNG...."
    png.write_bytes(b"\x89PNG...!")
    with pytest.raises(CellError, match="differs from what its job wrote"):
        cells.read_cell_bytes(png)


def test_every_damaged_output_is_named(tmp_path):
    found = [(f"c{i}.csv", "missing") for i in range(8)] + [("d.csv", "0 bytes where ...")]
    lines = cells.rebuild_lines(found)
    assert lines[:5] == [f"c{i}.csv: missing; its job reruns" for i in range(5)]
    assert lines[5] == "3 more rerun, each missing: c5.csv, c6.csv, c7.csv"
    assert lines[6] == "1 more rerun, each 0 bytes where ...: d.csv"
    assert all(p in " ".join(lines) for p, _ in found)


def test_a_dry_run_counts_rebuilds_without_writing_the_ledger(tmp_path):
    counts = {"a.csv": 1}
    cells.mark_rebuilds(tmp_path, [("a.csv", "missing")], counts, write=False)
    assert counts == {"a.csv": 2} and not (tmp_path / cells.LEDGER).exists()
    cells.mark_rebuilds(tmp_path, [("a.csv", "missing")], counts)
    assert json.loads((tmp_path / cells.LEDGER).read_text()) == {"a.csv": 3}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"a": "x"}'])
def test_an_unreadable_ledger_is_one_line(tmp_path, text):
    (tmp_path / cells.LEDGER).write_text(text)
    with pytest.raises(ConfigError, match="unreadable; delete it"):
        cells.rebuilds(tmp_path)


def test_a_probe_writes_nothing_and_sees_a_holder(tmp_path):
    probe(tmp_path / "results")
    assert not (tmp_path / "results").exists()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / NAME).write_text("")
    probe(tmp_path / "results")  # a lock file no one holds
    assert (tmp_path / "results" / NAME).read_text() == ""


def test_a_lock_that_cannot_be_written_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot write the sweep's lock there"):
        hold(tmp_path / ("r" * 300))
