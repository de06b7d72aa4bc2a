"""One group option's file as Hydra composes it over its `defaults`, parsed once per process: the
engine check reads the same few files for every cited figure."""

import copy
import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

from tilesweep.errors import ConfigError

# parsed_once's parses by (file, parser, sha256 of its bytes; not the mtime, which an edit can
# keep): a verdict composes twice, and the engine check reads the same files for every figure.
_PARSED: dict[tuple, object] = {}
# group_file's resolved keys by the repr of the merged keys they were resolved from.
_RESOLVED: dict[str, dict] = {}


def group_file(conf_dir: Path, group: str, option: str) -> dict:
    """Return conf_dir/group/option.yaml over its `defaults` files, resolved."""
    body, interpolates = _merged_file(Path(conf_dir), group, option)
    if not interpolates:
        return body
    # Resolved once per process for the same merged keys (their repr tells types apart).
    key = repr(body)
    if key not in _RESOLVED:
        from omegaconf import OmegaConf  # only a file with ${...} in it pays for OmegaConf

        _RESOLVED[key] = OmegaConf.to_container(OmegaConf.create(body), resolve=True)
    return copy.deepcopy(_RESOLVED[key])


def check_defaults(conf_dir: Path, group: str, option: str) -> None:
    """Raise ConfigError for a `defaults` list that is not this group's options or loops."""
    _merged_file(Path(conf_dir), group, option)


def find_defaults_loop(conf_dir: Path, groups: tuple[str, ...]) -> None:
    """Raise ConfigError naming the first option of `groups` with a bad or looping defaults list."""
    for group in groups:
        for path in sorted((Path(conf_dir) / group).glob("*.yaml")):
            try:
                check_defaults(conf_dir, group, path.stem)
            except ConfigError:
                raise
            except Exception:  # noqa: BLE001 - not YAML: the compose's own line names it
                continue


def _merged_file(
    conf_dir: Path, group: str, option: str, chain: tuple[str, ...] = ()
) -> tuple[dict, bool]:
    """Return (the option's keys over its defaults', unresolved; whether any interpolates)."""
    where = f"conf/{group}/{chain[0] if chain else option}.yaml"
    if option in chain:
        raise ConfigError(
            f"{where}: its defaults list loops ({' -> '.join((*chain, option))}); a file derives "
            "from other files of its group, never from itself"
        )
    own, interpolates = parsed_once(conf_dir / group / f"{option}.yaml", _parsed)
    if not isinstance(own, dict):
        raise ConfigError(f"conf/{group}/{option}.yaml: not a mapping")
    bases = own.pop("defaults", None) or []
    if not isinstance(bases, list):
        raise ConfigError(
            f"conf/{group}/{option}.yaml: defaults={bases!r}: not a list of {group} options"
        )
    options = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
    out: dict = {}
    for base in bases:
        if base == "_self_":  # this file's keys here: bases after it win over them, as in Hydra
            out = _merge(out, own)
            continue
        if not isinstance(base, str) or base not in options:
            raise ConfigError(
                f"conf/{group}/{option}.yaml: defaults entry {base!r} is not an option of "
                f"conf/{group} (one of: {', '.join(options)})"
            )
        body, more = _merged_file(conf_dir, group, base, (*chain, option))
        out, interpolates = _merge(out, body), interpolates or more
    return (out if "_self_" in bases else _merge(out, own)), interpolates


def parsed_once(path: Path, parse: Callable[[Path], object]) -> object:
    """Return a copy of parse(path), parsed once per content of the file."""
    key = (path.resolve(), parse, hashlib.sha256(path.read_bytes()).hexdigest())
    if key not in _PARSED:
        _PARSED[key] = parse(path)
    return copy.deepcopy(_PARSED[key])


def _parsed(path: Path) -> tuple[dict, bool]:
    """Return a YAML file's containers, unresolved, and whether it interpolates."""
    import yaml
    from omegaconf import OmegaConf

    text = path.read_bytes().decode()
    try:  # libyaml under OmegaConf's rules; a file it refuses gets OmegaConf's own message
        body = yaml.load(text, Loader=yaml_loader())
    except yaml.YAMLError:
        body = None
    if not isinstance(body, dict):  # also an empty file, which OmegaConf reads as {}
        body = OmegaConf.to_container(OmegaConf.create(text))
    return body, "${" in text


def _merge(base: dict, top: dict) -> dict:
    """Return `top` over `base` as OmegaConf.merge gives it (lists replaced)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@functools.lru_cache(maxsize=1)
def yaml_loader() -> type:
    """Return libyaml's safe loader under OmegaConf's scalar rules, refusing duplicate keys."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    class Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):
        yaml_implicit_resolvers = get_yaml_loader().yaml_implicit_resolvers

        def construct_mapping(self, node, deep=False):
            """Return the mapping; refuse a key given twice."""
            seen: set = set()
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"found duplicate key {k.value} at line {k.start_mark.line + 1}",
                        k.start_mark,
                    )
                if isinstance(k, yaml.ScalarNode):
                    seen.add(k.value)
            return super().construct_mapping(node, deep=deep)

    return Loader
