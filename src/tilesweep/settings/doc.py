"""The README's config table from the root's field descriptions; `--check` exits 1 if stale."""

import argparse
import sys
from pathlib import Path

import yaml

from tilesweep.errors import ConfigError
from tilesweep.settings.root import RootSettings

ROOT = Path(__file__).resolve().parents[3]
START = "<!-- configuration table: made by `python -m tilesweep.settings.doc`; edit the models -->"
END = "<!-- end of configuration table -->"
# Keys of the composed config a user does not set (read from a folder, not a group option).
NOT_SET = ("catalog",)


def _options(conf_dir: Path, key: str, default: str | None) -> str:
    """Return a group's options, the default first and marked, or a root key's default value."""
    folder = conf_dir / key
    if not folder.is_dir():
        return f"`{default}` (default)" if default is not None else ""
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    names = [n for n in names if n == default] + [n for n in names if n != default]
    return ", ".join(f"`{n}` (default)" if n == default else f"`{n}`" for n in names)


def table(conf_dir: Path = ROOT / "conf") -> str:
    """Return the configuration table: one row per key of conf/config.yaml."""
    config = yaml.safe_load((conf_dir / "config.yaml").read_text())
    # each group's default option as conf/config.yaml's defaults list names it
    items = [item for item in config.get("defaults", []) if isinstance(item, dict)]
    groups = {k: str(v) for item in items for k, v in item.items() if v is not None}
    rows = ["| key | options | sets |", "|---|---|---|"]
    for key, field in RootSettings.model_fields.items():
        if key in NOT_SET:
            continue
        if not field.description:
            raise ConfigError(f"RootSettings.{key}: no description to document it by")
        default = groups.get(key, config.get(key))
        if isinstance(default, bool):
            default = str(default).lower()
        rows.append(f"| `{key}` | {_options(conf_dir, key, default)} | {field.description} |")
    return "\n".join(rows)


def with_table(readme: str, conf_dir: Path = ROOT / "conf") -> str:
    """Return the README text with the generated table between its markers."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ConfigError(f"README.md: needs one {START!r} and one {END!r} line")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table(conf_dir)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Write the table into README.md (--check: exit 1 where it differs); return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tilesweep.settings.doc", description=__doc__)
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--check", action="store_true", help="exit 1 where the table differs")
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text()
        made = with_table(text)
    except (OSError, ConfigError) as exc:
        print(f"tilesweep.settings.doc: {exc}", file=sys.stderr)
        return 2
    if not args.check:
        args.readme.write_text(made)
    elif made != text:
        said = "the configuration table differs from the models'"
        print(f"{args.readme}: {said}; run python -m tilesweep.settings.doc", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
