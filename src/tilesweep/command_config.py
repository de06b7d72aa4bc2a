"""What `snakemake --config` takes (COMMAND_KEYS), checked before planning, and its overrides."""

import json
from pathlib import Path

from tilesweep.errors import ConfigError
from tilesweep.settings import RootSettings

# What `snakemake --config KEY=VALUE` takes; every other setting goes in overrides.
COMMAND_KEYS = {
    "overrides": "Hydra overrides, overrides='[\"key=value\"]'",
    "example": "a kept example folder to re-render",
    "device": "the machine the jobs are planned for (auto, cpu, h200x8)",
}


def check_command_config(config: dict) -> None:
    """Raise ConfigError for a `--config` key or value this command does not take."""
    for key, value in config.items():
        if key not in COMMAND_KEYS:
            hint = f"; write overrides='[\"{key}={value}\"]'" if key in _SETTING_KEYS else ""
            raise ConfigError(
                f"{key}={value!r}: not a --config key{hint}; valid: {', '.join(COMMAND_KEYS)}"
            )
    for key in ("example", "device"):
        if key in config and (not isinstance(config[key], str) or not config[key].strip()):
            raise ConfigError(f"{key}={config[key]!r}: expected one string ({COMMAND_KEYS[key]})")
    example = config.get("example")
    if example is not None and not Path(example).is_dir():
        raise ConfigError(f"example={example}: not a folder (a kept example is a folder)")


# The top-level settings of conf/config.yaml, which go in overrides, never in --config.
_SETTING_KEYS = (
    *(k for k in RootSettings.model_fields if k not in (*COMMAND_KEYS, "catalog")),
    "experiment",
)


def parse_overrides(raw: object) -> list[str]:
    """Return the Hydra overrides given as `--config overrides=[...]` (a list or one string)."""
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = raw.strip()
        if raw.startswith("["):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError:
                raise ConfigError(
                    f"overrides={raw!r}: not a list; write overrides='[\"key=value\"]'"
                ) from None
        else:
            raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(i, str) for i in raw):
        raise ConfigError(f"overrides={raw!r}: not a list of strings; write overrides='[\"k=v\"]'")
    return raw
