"""Rebuild an engine-tune folder's exported files and summary.csv from its kept tuned files and
held-out checks (no GPU): a key keeps its tuned config only where it won every check on every
routing, else the engine's default config (measure/engine_tune.rebuild_exports).

Usage: python tools/engine_export.py [FOLDER] [OVERRIDE ...]
(FOLDER defaults to docs/examples/h200/engine_tune)
"""

from __future__ import annotations

import sys

from tilesweep.config import compose
from tilesweep.measure.engine_tune import rebuild_exports

if __name__ == "__main__":
    args = sys.argv[1:]
    folder = args.pop(0) if args and "=" not in args[0] else "docs/examples/h200/engine_tune"
    summary = rebuild_exports(folder, compose(args))
    print(summary.drop(columns=["tune_s", "screened"]).to_string(index=False))
