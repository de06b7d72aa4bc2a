"""Compose the Hydra config once and validate it before any job runs.

Types, key names, finite numbers, ranges, choices and how the groups fit are the pydantic
models' in tilesweep.settings (pydantic, not Hydra structured configs, because it is already
installed and refuses NaN, infinity, unknown keys and wrong types with their location, where
OmegaConf's structured configs accept NaN and infinity). The checks here need more than the
composed config: the group options on disk, the hardware catalog, the question's and the
references' models in conf/model, and the deployment files' contents.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

from tilesweep import gpu_archs, question, references
from tilesweep.errors import ConfigError
from tilesweep.io import PROJECT_ROOT, project_path
from tilesweep.plan import engine_profile
from tilesweep.settings import HardwareSpec, ModelSettings, RootSettings, check
from tilesweep.settings.strict import Refused

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

_YAML_AT = re.compile(r'in "(.+)", line (\d+), column \d+')


def compose_settings(
    overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None
) -> RootSettings:
    """Return the composed config, validated once, as the typed settings object passed down
    (its as_dict() is compose()'s plain containers, for JSON)."""
    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    return validate(_compose_raw(overrides, conf_dir), conf_dir)


# The config groups a cited engine figure names (references.Figure.overrides): each a plain file
# under conf/<group>/, a deployment file over conf/deployment/default.yaml (its defaults list).
FIGURE_GROUPS = ("model", "hardware", "deployment", "engine")


def compose_groups(
    choices: dict[str, str], overrides: tuple[str, ...], conf_dir: Path | None = None
) -> RootSettings:
    """Return the settings of `overrides` with the FIGURE_GROUPS options `choices` names: one
    Hydra compose of `overrides` (kept for the process), then each group read from its file and
    the whole validated again; the same settings as composing the group options with the
    overrides, at a fraction of a Hydra compose each (the engine corpus composes many)."""

    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    _check_group_choices([f"{g}={v}" for g, v in choices.items()], conf_dir)
    raw = copy.deepcopy(_base_raw(tuple(overrides), conf_dir))
    for group, option in choices.items():
        if group not in FIGURE_GROUPS:
            raise ConfigError(f"{group}={option!r}: not one of {', '.join(FIGURE_GROUPS)}")
        try:
            raw[group] = group_file(conf_dir, group, option)
        except Exception as exc:  # YAML, a missing base file: one line, as compose gives
            raise ConfigError(_one_line(exc)) from None
    return validate(raw, conf_dir)


def group_file(conf_dir: Path, group: str, option: str) -> dict:
    """Return a group option's file as plain containers, over the options its `defaults` list
    names (as Hydra composes it; a derived engine or deployment file)."""
    from omegaconf import OmegaConf

    node = OmegaConf.load(Path(conf_dir) / group / f"{option}.yaml")
    if "defaults" in node:
        bases = [group_file(conf_dir, group, b) for b in node.pop("defaults") if b != "_self_"]
        node = OmegaConf.merge(*bases, node)
    return OmegaConf.to_container(node, resolve=True)


@functools.lru_cache(maxsize=4)
def _base_raw(overrides: tuple[str, ...], conf_dir: Path) -> dict:
    """Return the raw composition of overrides (compose_groups' starting point, kept)."""
    return _compose_raw(list(overrides), conf_dir)


def compose(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None) -> dict:
    """Return the composed, resolved and validated config as plain containers (what tests and
    tools read; the pipeline takes compose_settings())."""
    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    settings = _compose_raw(overrides, conf_dir)
    validate(settings, conf_dir)
    return settings


def _compose_raw(overrides: list[str] | tuple[str, ...], conf_dir: Path) -> dict:
    """Return the Hydra composition of conf_dir, resolved, with the hardware catalog: the plain
    containers before validation."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    overrides = [str(o) for o in overrides]
    _check_override_syntax(overrides)
    _check_group_choices(overrides, conf_dir)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
        settings = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # Hydra and OmegaConf raise many types; each becomes one line
        indexed = [o for o in overrides if o.startswith("references.figures.")]
        if indexed:  # the corpus is read after Hydra (references.figures_from)
            raise ConfigError(
                f"{indexed[0]}: the figures are read from references.figures_from, not "
                "overridden one by one; edit that file, or give inline figures with "
                "references=none references.figures=[...]"
            ) from None
        raise ConfigError(_one_line(exc)) from None
    finally:
        GlobalHydra.instance().clear()
    settings["catalog"] = load_catalog(conf_dir)
    references.read_figures_from(settings, conf_dir)
    return settings


def _check_override_syntax(overrides: list[str]) -> None:
    """Raise ConfigError naming the first override Hydra cannot parse, with the form it takes
    (Hydra's own words name a grammar rule, not the override)."""
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
    from omegaconf import OmegaConf

    catalog = {}
    for path in sorted((Path(conf_dir) / "hardware").glob("*.yaml")):
        try:
            spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except Exception as exc:  # YAML, binary bytes, an interpolation that names nothing
            why = _one_line(exc).removeprefix("bad config: ")
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


def validate(settings: dict, conf_dir: Path = CONF_DIR) -> RootSettings:
    """Return the composed config validated, as the settings object; raise ConfigError naming
    the first bad key and value."""
    gpu_archs.architectures()  # conf/architectures.yaml: a broken table is one line here
    checked = check_settings(settings)
    question.validate(checked.question, checked.catalog)
    references.validate(checked.references, conf_dir)
    _check_question_model(checked, conf_dir)
    _check_reference_figures(checked, conf_dir)
    _check_files(checked)
    _check_topology(checked)
    _check_engine_name(checked, conf_dir)
    return checked


def _check_engine_name(settings: RootSettings, conf_dir: Path) -> None:
    """Raise ConfigError for an engine file whose name is not its file's (the figures and rows
    are labelled with the name, so another engine's would borrow its label)."""
    from omegaconf import OmegaConf

    name = settings.engine.name
    files = {p.stem for p in (Path(conf_dir) / "engine").glob("*.yaml")}
    if name not in files:
        raise ConfigError(
            f"engine.name={name!r}: no conf/engine/{name}.yaml; an engine file's name is its file "
            f"name ({', '.join(sorted(files))})"
        )
    table = gpu_archs.architectures()
    for family, lists in settings.engine.families.items():
        for where in ("per_layer", "per_moe_layer", "per_dense_layer", "per_step"):
            for i, kernel in enumerate(getattr(lists, where)):
                unknown = [a for a in kernel.only_arch if a.removesuffix("a") not in table]
                if unknown:
                    raise ConfigError(
                        f"engine.families.{family}.{where}[{i}].only_arch={unknown[0]}: not an "
                        f"architecture conf/architectures.yaml lists ({', '.join(table)})"
                    )
    own = OmegaConf.load(Path(conf_dir) / "engine" / f"{name}.yaml")
    if own.get("version") != settings.engine.version:
        raise ConfigError(
            f"engine.name={name!r}: conf/engine/{name}.yaml is another engine (version "
            f"{own.get('version')!r}, not {settings.engine.version!r}); an engine file's name "
            "is its file name"
        )


@functools.lru_cache(maxsize=64)
def _engine_families(folder: str, name: str) -> frozenset | None:
    """Return the model families an engine file lists kernels for (empty: the project's own
    step, any model), or None where there is no such file or it is not a mapping."""
    path = Path(folder) / f"{name}.yaml"
    if not path.is_file():
        return None
    try:
        data = group_file(path.parents[1], "engine", name)
    except Exception:  # noqa: BLE001 - the engine group's own check names the fault
        return None
    if not isinstance(data, dict):
        return None
    return frozenset(data.get("families") or {})


def _check_topology(settings: RootSettings) -> None:
    """Raise ConfigError for a deployment.topology the target's hardware file does not have."""
    named = settings.deployment.topology
    if not named:
        return
    block = settings.hardware.interconnect_model
    have = sorted(block.topologies) if block else []
    if named not in have:
        where = f"hardware[{settings.hardware.name}]"
        valid = f"valid: {', '.join(have)}" if have else "it has no interconnect_model"
        raise ConfigError(f"deployment.topology={named!r}: not a topology of {where}; {valid}")


def check_settings(settings: dict) -> RootSettings:
    """Return the composed config as the settings object; raise ConfigError naming the first key
    whose type, range or choice the models refuse, or that does not fit another group. It reads
    the plain containers first: a bad hardware spec is named by its file, and a backend section
    by its backend's own model (RootSettings keeps each section as the mapping it checked)."""
    for name, spec in settings["catalog"].items():
        _check_cc(check(HardwareSpec, spec, f"hardware[{name}]"), f"hardware[{name}]")
    checked = check(RootSettings, settings)
    _check_cc(checked.hardware, "hardware")
    check_backends(settings["backend"])
    check_runners(checked)
    return checked


def _check_cc(spec: HardwareSpec, where: str) -> None:
    """Raise ConfigError where a hardware spec's architecture is not one conf/architectures.yaml
    lists, or its compute capability is not that architecture's."""
    table = gpu_archs.architectures()
    row = table.get(spec.arch.removesuffix("a"))
    if row is None:
        raise ConfigError(
            f"{where}.arch={spec.arch}: not an architecture conf/architectures.yaml lists "
            f"({', '.join(table)}); add it there first"
        )
    if row.cc != spec.cc:
        raise ConfigError(
            f"{where}.cc={spec.cc}: {spec.arch} is compute capability {row.cc} "
            "(conf/architectures.yaml)"
        )


def check_runners(settings: RootSettings) -> None:
    """Raise ConfigError when no enabled backend builds kernels, bench.step_runner names no
    backend with a step runner, or a backend refuses its own section's values."""
    # cycle: the registry's discovery imports fused_moe.commands, which imports config
    from tilesweep import backends

    if not any(b.builder for b in backends.enabled(settings)):
        builders = [b.name for b in backends.builders()]
        raise ConfigError(
            f"backend: {' and '.join(builders)} are {'both' if len(builders) == 2 else 'all'} "
            "disabled; enable at least one to have kernels"
        )
    runner = settings.bench.step_runner
    if runner != "auto" and not backends.step_capable(runner):
        allowed = ["auto", *backends.step_runner_help()]
        raise ConfigError(f"bench.step_runner={runner!r}: allowed: {', '.join(allowed)}")
    for b in backends.registered():
        if b.name in settings.backend:
            b.validate(settings)


def check_backends(section: dict) -> None:
    """Raise ConfigError for a backend section no registered backend reads, or a bad key."""
    # cycle: the registry's discovery imports fused_moe.commands, which imports config
    from tilesweep import backends

    known = {b.name: b for b in backends.registered() if b.settings_model}
    for name, value in section.items():
        if name not in known:
            raise ConfigError(f"backend.{name}: unknown backend; allowed: {', '.join(known)}")
        check(known[name].settings_model, value, f"backend.{name}")


def _one_line(exc: Exception) -> str:
    """Return the first meaningful line of a Hydra/OmegaConf error."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = lines[0] if lines else type(exc).__name__
    where = next((m for ln in lines if (m := _YAML_AT.match(ln))), None)
    if where:  # a YAML error: the file and line first, then what the parser says
        said = "; ".join(ln for ln in lines if not _YAML_AT.match(ln))
        return f"{where.group(1)}, line {where.group(2)}: not valid YAML ({said})"
    if "Could not find" in head or "not found in" in head:
        # Hydra lists the valid options on the next lines: keep them on one line.
        opts = [ln.lstrip("\t ") for ln in lines[1:] if not ln.startswith("Config search path")]
        if opts:
            head = f"{head} {' '.join(opts)}"
    return f"bad config: {head}"


def _check_group_choices(overrides: list[str], conf_dir: Path) -> None:
    """Raise ConfigError for a config group option that is a path: every option is a file
    inside conf/<group>/, never one elsewhere (hardware=../../elsewhere/h200)."""
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    for item in overrides:
        key, sep, value = item.partition("=")
        group = key.lstrip("+~")
        if not sep or group not in groups:
            continue
        options = ", ".join(sorted(p.stem for p in (conf_dir / group).glob("*.yaml")))
        if "/" in value or "\\" in value or ".." in value:
            raise ConfigError(
                f"{item}: a {group} option names a file in conf/{group}/ (one of: {options})"
            )
        if value.strip().startswith(("[", "{")) or "," in value:
            # Hydra would merge the files into one hybrid (b200 with h200's figures).
            raise ConfigError(f"{item}: a {group} option is one name, not a list; valid: {options}")
        if key == group and not (conf_dir / group / f"{value.strip()}.yaml").is_file():
            raise ConfigError(f"{group}={value.strip()!r}: unknown {group}; valid: {options}")


def _check_question_model(settings: RootSettings, conf_dir: Path) -> None:
    """Raise ConfigError for a question about a model conf/model does not have (its panel would
    never appear)."""
    asked = question.of(settings)
    options = sorted(p.stem for p in (Path(conf_dir) / "model").glob("*.yaml"))
    if asked is not None and asked.model not in options:
        raise ConfigError(
            f"question.model={asked.model!r}: unknown model; valid: {', '.join(options)}"
        )


def _check_reference_figures(settings: RootSettings, conf_dir: Path) -> None:
    """Raise ConfigError for a cited figure given twice, or one whose layout its model cannot be
    split into (named by the figure's key, not the grid's)."""
    from omegaconf import OmegaConf

    seen: list[dict] = []
    models: dict[str, tuple[dict, ModelSettings]] = {}  # each model file read and checked once
    for i, fig in enumerate(references.of(settings).figures):
        where = f"references.figures[{i}]"
        key = {k: v for k, v in fig if k not in ("source", "tpot_ms", "speculative")}
        if key in seen:
            raise ConfigError(
                f"{where}: repeats references.figures[{seen.index(key)}] (same engine, version, "
                "model, hardware, deployment, layout, batch and context); give each figure once"
            )
        seen.append(key)
        if fig.model not in models:
            try:
                model = OmegaConf.to_container(
                    OmegaConf.load(Path(conf_dir) / "model" / f"{fig.model}.yaml"), resolve=True
                )
                check(ModelSettings, model, f"model[{fig.model}]")
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError(f"{where}.model={fig.model!r}: {_one_line(exc)}") from None
            models[fig.model] = (model, ModelSettings.model_validate(model))
        model, typed = models[fig.model]
        families = _engine_families(str(Path(conf_dir) / "engine"), fig.engine_name())
        fam = engine_profile.family(model)  # the model as its file gives it
        if families is None:
            raise ConfigError(
                f"{where}.engine={fig.engine!r}: no conf/engine/{fig.engine_name()}.yaml; name its "
                "engine file in engine_config"
            )
        if families and fam not in families:
            raise ConfigError(
                f"{where}.engine={fig.engine!r}: conf/engine/{fig.engine_name()}.yaml has no "
                f"kernel list for the {fam} family of {fig.model} (it has "
                f"{', '.join(sorted(families))})"
            )
        try:
            fig.layout.fit(typed)
        except Refused as exc:
            raise ConfigError(exc.line(f"{where}.layout")) from None


def _check_files(settings: RootSettings) -> None:
    """Raise ConfigError for a deployment file (fit_file, attention_table) that is missing, not
    of its kind (a fit: a JSON object with a per-kernel cost; a table: a CSV with the tune's
    columns), or outside the checkout and results_dir unless read_outside is true."""
    dep = settings.deployment
    allowed = [PROJECT_ROOT, Path(settings.results_dir).resolve()]
    hints = {
        "fit_file": "a kept GPU run's tables/fit.json",
        "attention_table": "tools/h200_mla_tune.py writes one",
    }
    for key, fault in (("fit_file", _fit_fault), ("attention_table", _attention_fault)):
        value = getattr(dep, key)
        if not value:
            continue
        where = f"deployment.{key}={value!r}"
        path = project_path(value)
        if not path.is_file():
            raise ConfigError(f'{where}: no such file ({hints[key]}; "" for none)')
        inside = any(path.resolve().is_relative_to(a) for a in allowed)
        if not inside and not settings.read_outside:
            raise ConfigError(
                f"{where}: outside the checkout and results_dir; copy it into either, or set "
                "read_outside=true to read it where it is"
            )
        why = fault(path)
        if why:
            raise ConfigError(f"{where}: {why} ({hints[key]})")


# What the verdict reads of a shipped fit: a per-kernel cost and the fitted groups.
_FIT_KEYS = {"per_kernel_us": (int, float), "groups": dict, "device": str}
_MAX_FIT_BYTES = 1 << 24


def _fit_fault(path: Path) -> str | None:
    """Return why a file is not a launch-aware fit, or None when it is one."""
    import json
    import math

    with path.open("rb") as handle:
        data = handle.read(_MAX_FIT_BYTES + 1)
    if len(data) > _MAX_FIT_BYTES:
        return f"over {_MAX_FIT_BYTES:,} bytes: not a fit"
    try:
        fit = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if not isinstance(fit, dict):
        return f"not a fit (a JSON {type(fit).__name__}, not an object)"
    if "gap" in fit and "per_kernel_us" not in fit:
        return f"holds no fit, only why none was made ({str(fit['gap'])[:120]})"
    for key, kind in _FIT_KEYS.items():
        value = fit.get(key)
        if key not in fit or isinstance(value, bool) or not isinstance(value, kind):
            return f"not a fit: no {key} ({_kind_name(kind)})"
    if not math.isfinite(fit["per_kernel_us"]) or fit["per_kernel_us"] < 0:
        return f"per_kernel_us={fit['per_kernel_us']}: not a finite cost"
    if not fit["groups"]:
        return "not a fit: no groups"
    for key, (low, high) in _FIT_NUMBERS.items():
        value = fit.get(key, low)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key}={value!r}: not a number"
        if not math.isfinite(value) or not low <= value <= high:
            return f"{key}={value}: outside {low:g}..{high:g}"
    for name, group in fit["groups"].items():
        why = _group_fault(group)
        if why:
            return f"groups.{name}: {why}"
    return None


# What the composition reads of a fit beside its groups (absent: the first bound, unused): the
# share of launch cost hidden by overlap, the largest efficiency and the light kernels' cost.
_FIT_NUMBERS = {"overlap": (0.0, 0.99), "e_bw_max": (0.01, 2.0), "light_kernel_us": (0.0, 1e6)}
# The part kinds a group may cover (plan.step_parts and the engines' kernel kinds).
_PART_KINDS = (
    "attention",
    "attention_gqa",
    "attention_proj",
    "dense_gemm",
    "embedding",
    "expert_gemm",
    "expert_permute",
    "indexer",
    "lm_head",
    "norm",
    "router",
    "shared_gemm",
    "extra",
)
# What the composition reads of each fitted group: its efficiencies (fractions, at most a little
# over 1 before they are put on a datasheet), its per-kernel cost and launches, and its kinds.
_GROUP_NUMBERS = {
    "e_bw": (0.0, 2.0),
    "e_math": (0.0, 2.0),
    "per_kernel_us": (0.0, 1e6),
    "launches_per_occurrence": (0.0, 1e6),
}


def _group_fault(group: object) -> str | None:
    """Return why one fitted group is not usable (a missing, negative, NaN or absurd piece),
    or None."""
    import math

    if not isinstance(group, dict):
        return "not a mapping"
    for key, (low, high) in _GROUP_NUMBERS.items():
        value = group.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"no {key} (a number)"
        if not math.isfinite(value) or not low <= value <= high:
            return f"{key}={value}: outside {low:g}..{high:g}"
    kinds = group.get("kinds")
    if not kinds:
        return "no kinds (the part kinds it covers)"
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        return "kinds: not a list of part kinds"
    unknown = [k for k in kinds if k not in _PART_KINDS]
    if unknown:
        return f"kinds: {unknown[0]!r} is not a part kind ({', '.join(_PART_KINDS)})"
    return None


def _kind_name(kind) -> str:
    """Return what a type tuple or type is, in words."""
    return {dict: "a mapping", str: "a string"}.get(kind, "a number")


# What the verdict reads of an attention table (plan/attention_table.py).
_ATTENTION_COLUMNS = ("status", "device", "heads", "sequences", "top", "ms")


def _attention_fault(path: Path) -> str | None:
    """Return why a file is not an attention tune table, or None when it is one."""
    import pandas as pd

    try:
        rows = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        return "not a CSV table"
    missing = [c for c in _ATTENTION_COLUMNS if c not in rows.columns]
    if missing:
        return f"not an attention table: no column {', '.join(missing)}"
    for col in ("heads", "sequences", "top", "ms"):
        if not pd.api.types.is_numeric_dtype(rows[col]):
            return f"not an attention table: column {col} is not numbers"
        ok = rows["status"].astype(str) == "ok"
        bad = rows.loc[ok, col]
        if (~bad.map(lambda v: v == v and abs(v) != float("inf")) | (bad < 0)).any():
            return f"column {col} holds a negative, NaN or infinite value on an ok row"
    return None
