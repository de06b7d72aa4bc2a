"""Compose the Hydra config once and validate it before any job runs: the models in
tilesweep.settings, then the checks that need more (here, config_checks, deployment_files)."""

import copy
import functools
import os
import stat
from pathlib import Path

from tilesweep import config_checks, gpu_archs, references
from tilesweep.deployment_files import check_files
from tilesweep.errors import ConfigError, one_line
from tilesweep.group_files import check_defaults, find_defaults_loop, group_file, parsed_once
from tilesweep.settings import RootSettings

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_settings(
    overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None
) -> RootSettings:
    """Return the composed config, validated once, as the typed settings object."""
    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    return validate(_compose_raw(overrides, conf_dir), conf_dir)


# The config groups a cited engine figure names (references.Figure.overrides): each a plain file
# under conf/<group>/, a deployment file over conf/deployment/default.yaml (its defaults list).
FIGURE_GROUPS = ("model", "hardware", "deployment", "engine")


def compose_groups(
    choices: dict[str, str], overrides: tuple[str, ...], conf_dir: Path | None = None
) -> RootSettings:
    """Return the settings of `overrides` with the FIGURE_GROUPS options `choices` names."""
    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    _check_group_choices([f"{g}={v}" for g, v in choices.items()], conf_dir)
    raw = copy.deepcopy(_base_raw(tuple(overrides), conf_dir))
    for group, option in choices.items():
        if group not in FIGURE_GROUPS:
            raise ConfigError(f"{group}={option!r}: not one of {', '.join(FIGURE_GROUPS)}")
        try:
            raw[group] = group_file(conf_dir, group, option)
        except ConfigError:
            raise
        except Exception as exc:  # YAML, a missing base file: one line, as compose gives
            raise ConfigError(one_line(exc)) from None
    _check_chosen_files(raw, choices)
    return validate(raw, conf_dir)


@functools.lru_cache(maxsize=4)
def _base_raw(overrides: tuple[str, ...], conf_dir: Path) -> dict:
    """Return the raw composition of overrides (compose_groups' starting point, kept)."""
    return _compose_raw(list(overrides), conf_dir)


def compose(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None) -> dict:
    """Return the composed, validated config as plain containers."""
    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    settings = _compose_raw(overrides, conf_dir)
    validate(settings, conf_dir)
    return settings


def _compose_raw(overrides: list[str] | tuple[str, ...], conf_dir: Path) -> dict:
    """Return conf_dir's Hydra composition with the catalog, before validation."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    overrides = [str(o) for o in overrides]
    _check_override_syntax(overrides)
    check_conf_files(conf_dir)
    _check_group_choices(overrides, conf_dir)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
        choices = {k: v for k, v in cfg.hydra.runtime.choices.items() if k in DERIVED_GROUPS}
        with open_dict(cfg):
            del cfg["hydra"]
        settings = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # Hydra and OmegaConf raise many types; each becomes one line
        if isinstance(exc, RecursionError) or "maximum recursion depth" in str(exc):
            find_defaults_loop(conf_dir, DERIVED_GROUPS)  # Hydra overflows on a defaults loop
        indexed = [o for o in overrides if o.startswith("references.figures.")]
        if indexed:  # the corpus is read after Hydra (references.figures_from)
            raise ConfigError(
                f"{indexed[0]}: the figures are read from references.figures_from, not "
                "overridden one by one; edit that file, or give inline figures with "
                "references=none references.figures=[...]"
            ) from None
        raise ConfigError(one_line(exc)) from None
    finally:
        GlobalHydra.instance().clear()
    for group, option in choices.items():
        if option:
            check_defaults(conf_dir, group, option)
    _check_chosen_files(settings, choices)
    settings["catalog"] = load_catalog(conf_dir)
    references.read_figures_from(settings, conf_dir)
    return settings


# The config groups whose option files derive from others of their group (a `defaults` list).
DERIVED_GROUPS = ("engine", "deployment")


def _check_chosen_files(raw: dict, choices: dict) -> None:
    """Raise ConfigError for an engine option whose `name` is not its file's."""
    option = choices.get("engine")
    engine = raw.get("engine")
    name = engine.get("name") if isinstance(engine, dict) else None
    if option and name != option:
        raise ConfigError(
            f"engine={option}: conf/engine/{option}.yaml gives name={name!r}; an engine file's "
            "name is its file name (rows are labelled with it)"
        )


def _check_override_syntax(overrides: list[str]) -> None:
    """Raise ConfigError naming the first override Hydra cannot parse, with the form it takes."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for item in overrides:
        if "=" in item and not item.split("=", 1)[0].lstrip("+~"):
            raise ConfigError(f"override {item!r}: no key before '='; give key=value")
        try:
            parser.parse_override(item)
        except Exception:  # noqa: BLE001 - any parse failure is this override's form
            shown = item if len(item) <= 80 else item[:77] + "..."
            raise ConfigError(
                f"override {shown!r}: not key=value as Hydra reads it (a dotted key, '='; lists "
                "as [a,b], mappings as {k:v}, balanced brackets; quote a value holding spaces or "
                "brackets)"
            ) from None


def load_catalog(conf_dir: Path) -> dict[str, dict]:
    """Return every hardware spec under conf/hardware, by name."""
    catalog = {}
    for path in sorted((Path(conf_dir) / "hardware").glob("*.yaml")):
        try:
            # resolved (a verdict composes twice, each reading the whole catalog): once per content
            spec = parsed_once(path, _resolved_file)
        except Exception as exc:  # YAML, binary bytes, an interpolation that names nothing
            why = one_line(exc).removeprefix("bad config: ")
            raise ConfigError(
                why if str(path) in why else f"{path}: not a usable file ({why})"
            ) from None
        if isinstance(spec, dict) and "name" in spec and spec["name"] != path.stem:
            raise ConfigError(
                f"hardware[{path.stem}].name={spec['name']!r}: differs from its file name "
                f"{path.name}; rows are labelled with the name, so the two must agree"
            )
        catalog[path.stem] = spec
    claimed: dict[str, str] = {}
    for name, spec in catalog.items():
        for device in spec.get("device_names") or [] if isinstance(spec, dict) else []:
            if device in claimed:
                raise ConfigError(
                    f"hardware[{name}].device_names: {device!r} is hardware[{claimed[device]}]'s "
                    "too; a device name belongs to one file, or a run on it reads the wrong one"
                )
            claimed[device] = name
    return catalog


def _resolved_file(path: Path) -> object:
    """Return a YAML file's plain containers as OmegaConf resolves them."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def validate(settings: dict, conf_dir: Path = CONF_DIR) -> RootSettings:
    """Return the config as the settings object; raise ConfigError naming a bad key."""
    gpu_archs.architectures()  # conf/architectures.yaml: a broken table is one line here
    checked = config_checks.check_settings(settings)
    config_checks.check_question(checked)
    references.validate(checked.references, conf_dir)
    config_checks.check_question_model(checked, conf_dir)
    config_checks.check_reference_figures(checked, conf_dir)
    check_files(checked)
    config_checks.check_topology(checked)
    config_checks.check_prefill_chunk(checked)
    config_checks.check_engine_name(checked, conf_dir)
    return checked


def check_conf_files(conf_dir: Path) -> None:
    """Raise ConfigError naming a conf/ file Hydra must not read."""
    for folder, _, names in os.walk(conf_dir):
        for name in sorted(names):
            path = Path(folder) / name
            try:
                mode = path.stat().st_mode
            except OSError as exc:
                why = "a link to nothing" if path.is_symlink() else f"unreadable ({exc.strerror})"
                raise ConfigError(f"{path}: {why}; a config file is a plain YAML file") from None
            if not stat.S_ISREG(mode):
                raise ConfigError(
                    f"{path}: not a plain file (a pipe, a device or a socket): reading it would "
                    "block; a config file is a plain YAML file"
                )
            parts = path.relative_to(conf_dir).parts
            # The figures corpus is read by references.py alone, which names its faults (an
            # emptied references file too: 'no figures').
            if name.endswith(".yaml") and parts[:2] != ("references", "corpus"):
                _check_expansion(path, empty_ok=parts[0] == "references")
    _check_root(Path(conf_dir) / "config.yaml")


# The most nodes a config file may expand to with its aliases resolved (the largest shipped file,
# the figures corpus, has a few thousand).
MAX_NODES = 1_000_000
# Files already found to expand within MAX_NODES, by (path, size, mtime, inode).
_EXPANDS_OK: set[tuple] = set()


def _check_expansion(path: Path, empty_ok: bool = False) -> None:
    """Raise ConfigError where a YAML file's aliases expand past MAX_NODES nodes (an alias bomb)."""
    import yaml

    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key in _EXPANDS_OK:
        return
    data = path.read_bytes()
    try:
        lines = [ln.strip() for ln in data.decode().splitlines()]
    except UnicodeDecodeError:
        raise ConfigError(
            f"{path}: not text (bytes that are not UTF-8); a config file is YAML"
        ) from None
    if not empty_ok and all(not ln or ln.startswith("#") or ln in ("---", "...") for ln in lines):
        raise ConfigError(
            f"{path}: holds nothing (empty, or comments only); a config file holds its settings "
            "(restore it, or remove it)"
        )
    if b"*" in data:
        try:
            root = yaml.compose(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (yaml.YAMLError, ValueError):
            return  # Hydra names the file and line of a YAML error
        sizes: dict[int, int] = {}

        def size(node) -> int:
            if sizes.get(id(node)) == -1:
                raise ConfigError(f"{path}: a YAML alias inside its own anchor (a loop)")
            if id(node) not in sizes:
                sizes[id(node)] = -1  # being counted
                value = node.value if isinstance(node.value, list) else []
                parts = [p for pair in value for p in (pair if isinstance(pair, tuple) else [pair])]
                sizes[id(node)] = min(1 + sum(size(p) for p in parts), MAX_NODES + 1)
            return sizes[id(node)]

        if root is not None and size(root) > MAX_NODES:
            raise ConfigError(
                f"{path}: its YAML aliases expand past {MAX_NODES:,} values (an alias bomb?); "
                "a config file spells its values out"
            )
    _EXPANDS_OK.add(key)


def _check_root(path: Path) -> None:
    """Raise ConfigError where the root config holds no `defaults` list."""
    import yaml

    try:
        root = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # Hydra names the file and line of a YAML error; a missing one is named too
    if not isinstance(root, dict) or not isinstance(root.get("defaults"), list):
        raise ConfigError(
            f"{path}: no `defaults` list (the root config names each group's file); restore it "
            "(git checkout conf/config.yaml)"
        )


def _check_group_choices(overrides: list[str], conf_dir: Path) -> None:
    """Raise ConfigError for a group option that is a path rather than a file in conf/<group>/."""
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    for item in overrides:
        key, sep, value = item.partition("=")
        group = key.lstrip("+~")
        if not sep or group not in groups:
            continue
        files = [p for p in (conf_dir / group).glob("*.yaml") if p.is_file()]
        options = ", ".join(sorted(p.stem for p in files))
        if "/" in value or "\\" in value or ".." in value:
            raise ConfigError(
                f"{item}: a {group} option names a file in conf/{group}/ (one of: {options})"
            )
        if value.strip().startswith(("[", "{")) or "," in value:
            # Hydra would merge the files into one hybrid (b200 with h200's figures).
            raise ConfigError(f"{item}: a {group} option is one name, not a list; valid: {options}")
        chosen = conf_dir / group / f"{value.strip()}.yaml"
        if key == group and chosen.is_dir():
            raise ConfigError(f"{group}={value.strip()!r}: {chosen} is a folder, not a config file")
        if key == group and not chosen.is_file():
            raise ConfigError(f"{group}={value.strip()!r}: unknown {group}; valid: {options}")
