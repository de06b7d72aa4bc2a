"""After the decode benchmark: the best tile per batch as fused-MoE config files."""

from __future__ import annotations

import json

from tilesweep.aggregate import concat_tables
from tilesweep.io import write_json
from tilesweep.steps import logged
from tilesweep.tuned import fused_moe_config


def tune_configs(
    settings_json: str,
    decode_paths: list[str],
    outputs: dict[str, str],
    log_path: str | None = None,
) -> None:
    """Write one config file per dtype (outputs maps dtype to path)."""
    settings = json.loads(settings_json)
    decode = concat_tables(decode_paths)
    with logged(log_path) as log:
        for dtype, path in outputs.items():
            config = fused_moe_config(decode, dtype, settings["model"])
            log.info("%s: best tiles for %d batch sizes", dtype, len(config))
            write_json(path, config)
