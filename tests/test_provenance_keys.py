"""The provenance keys are declared once (columns.py): what tilesweep.provenance writes into rows
is what the report and `tilesweep compare` read."""

from __future__ import annotations

from tilesweep import columns, compare, provenance
from tilesweep.report import measurement_sections


def test_a_measured_row_carries_every_declared_provenance_key():
    row = provenance.stamp()
    assert set(columns.PROVENANCE_KEYS) <= set(row)
    assert columns.TOOLCHAIN_KEY not in row  # a measured row names its versions one by one


def test_a_build_row_carries_the_build_keys_and_the_launch_table_keeps_them():
    row = provenance.build_stamp("triton 3.0")
    assert tuple(row) == columns.BUILD_PROVENANCE_KEYS
    assert columns.LAUNCH_COLUMNS[-len(row) :] == list(columns.BUILD_PROVENANCE_KEYS)


def test_the_readers_take_the_declared_keys():
    assert set(columns.RUN_PROVENANCE_KEYS) == {
        *columns.PROVENANCE_KEYS,
        *columns.BUILD_PROVENANCE_KEYS,
    }
    assert measurement_sections.columns is columns  # its provenance section reads them there
    assert compare.RUN_PROVENANCE_KEYS is columns.RUN_PROVENANCE_KEYS
