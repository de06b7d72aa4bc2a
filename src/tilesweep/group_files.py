"""One config group option's file as Hydra composes it: over the options its `defaults` list
names (a derived engine or deployment file). Each file is parsed once per process (by path,
mtime and size): the engine check reads the same few files for every cited figure, and an
engine's kernel lists are a long pure-Python YAML parse."""

from __future__ import annotations

import copy
from pathlib import Path

# _parsed by (file, mtime, size): (its plain containers, unresolved; whether it interpolates).
_PARSED: dict[tuple, tuple[dict, bool]] = {}


def group_file(conf_dir: Path, group: str, option: str) -> dict:
    """Return conf_dir/group/option.yaml as plain containers, over the files its `defaults`
    list names (each of the same group, merged in order, this file's own keys last), resolved."""
    body, interpolates = _merged_file(Path(conf_dir), group, option)
    if not interpolates:
        return body
    from omegaconf import OmegaConf  # only a file with ${...} in it pays for OmegaConf

    return OmegaConf.to_container(OmegaConf.create(body), resolve=True)


def _merged_file(conf_dir: Path, group: str, option: str) -> tuple[dict, bool]:
    """Return (the option's keys over its defaults', unresolved; whether any interpolates)."""
    own, interpolates = _parsed(conf_dir / group / f"{option}.yaml")
    if not isinstance(own, dict):
        raise ValueError(f"conf/{group}/{option}.yaml: not a mapping")
    out: dict = {}
    for base in own.pop("defaults", None) or []:
        if base != "_self_":
            body, more = _merged_file(conf_dir, group, str(base))
            out, interpolates = _merge(out, body), interpolates or more
    return _merge(out, own), interpolates


def _parsed(path: Path) -> tuple[dict, bool]:
    """Return a copy of a YAML file's plain containers (OmegaConf's parse, unresolved) and
    whether it holds an interpolation."""
    from omegaconf import OmegaConf

    stat = path.stat()
    key = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        text = path.read_text()
        _PARSED[key] = (OmegaConf.to_container(OmegaConf.create(text)), "${" in text)
    body, interpolates = _PARSED[key]
    return copy.deepcopy(body), interpolates


def _merge(base: dict, top: dict) -> dict:
    """Return `top` over `base` as OmegaConf.merge gives it: mappings merged key by key, any
    other value (a list too) replaced."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
