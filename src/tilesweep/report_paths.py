"""Where the joining rules read and write: a sweep's results, or a kept example's folder."""

from pathlib import Path

from tilesweep import backends
from tilesweep.errors import ConfigError
from tilesweep.report.document import FIGURES

# Each figure's category in `snakemake --report`: report.document.FIGURES, then the tuners' own.
FIGURE_CATEGORIES = {
    **{name: figure[2] for name, figure in FIGURES.items()},
    **{name: figure[0] for name, figure in backends.report_figures().items()},
}

# The measured tables the tables step joins from the per-cell outputs.
MEASURED_TABLES = ("launch", "decode", "collective", "layout", "power", "tune")
# The composed tables: the verdict and engines (verdict step), the check (check step, which
# waits for every whole step; the verdict does not).
VERDICT_TABLES = ("verdict", "check", "engines")
COMPOSED_TABLES = ("verdict", "engines")
CHECK_TABLES = ("check",)
# A kept example's own record of the overrides it was made with.
EXAMPLE_OVERRIDES = "overrides.yaml"
# What the report step writes beside the tables: both reports and the answer card.
REPORT_FILES = ("report.md", "report.html", "answer.json")


def example_overrides(folder: str) -> list[str]:
    """Return the overrides a kept example was made with (its overrides.yaml)."""
    from omegaconf import OmegaConf

    path = Path(folder) / EXAMPLE_OVERRIDES
    if not path.is_file():
        raise ConfigError(
            f"example={folder}: no {EXAMPLE_OVERRIDES} there (a kept example has one)"
        )
    try:
        saved = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as exc:  # noqa: BLE001 - not YAML: one line, whatever the parser raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"example={folder}: {EXAMPLE_OVERRIDES} is not YAML ({first})") from None
    overrides = saved.get("overrides", []) if isinstance(saved, dict) else None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(
            f"example={folder}: {EXAMPLE_OVERRIDES} must hold `overrides:`, a list of strings"
        )
    return overrides


class Stage5:
    """Where the verdict, figure and report steps read and write (sweep or example)."""

    def __init__(self, sweep, example: str | None = None):
        self.example = example
        if example:
            folder = Path(example)
            self.tables, self.plots, self.reports = folder, folder / "plots", folder
            self.measured = {n: [str(folder / f"{n}.csv")] for n in MEASURED_TABLES[:-1]}
            self.composed_from = {n: self.measured[n] for n in ("decode", "collective", "layout")}
            self.checked_from = {n: self.measured[n] for n in ("layout", "collective")}
            kept = backends.example_inputs(folder)
            self.measured["tune"] = kept.get("tune", [])
            self.ceilings = [str(folder / "ceilings.json")]
            self.provenance: list[str] = []
            self.dropins = kept.get("dropins", [])
        else:
            self.tables, self.plots = sweep.results / "tables", sweep.results / "plots"
            self.reports = sweep.results
            self.measured = {n: [str(self.tables / f"{n}.csv")] for n in MEASURED_TABLES}
            # The verdict reads only the per-cell outputs it needs, so it waits for nothing else.
            self.composed_from = {
                "decode": sweep.decode_outputs(sweep.answer_decode_jobs()),
                "collective": sweep.collective_outputs(),
                "layout": sweep.fit_layout_outputs(),
            }
            # The check reads every whole step (and the collectives), each cell's own output.
            self.checked_from = {
                "layout": sweep.layout_outputs(),
                "collective": sweep.collective_outputs(),
            }
            self.ceilings = [sweep.path("device", "ceilings.json")]
            self.provenance = [str(self.tables / "provenance.json")]
            self.dropins = []  # a sweep's tuners (opt-in) list their own under tuned/
        fit = sweep.shipped_fit()
        # A kept example's own fit is the verdict's output there, never its input.
        self.shipped_fit = [
            f for f in fit if Path(f).resolve() != (self.tables / "fit.json").resolve()
        ]
        self.parquet = not example

    @property
    def per_cell(self) -> bool:
        """Return whether the verdict reads per-cell outputs (a sweep)."""
        return not self.example

    def verdict_inputs(self) -> dict[str, list[str]]:
        """Return what the verdict step reads, by name (its named inputs)."""
        return {**self.composed_from, "ceilings": self.ceilings, "shipped_fit": self.shipped_fit}

    def check_inputs(self) -> dict[str, list[str]]:
        """Return the check step's named inputs: every measured whole step and the collectives."""
        return {**self.checked_from, "ceilings": self.ceilings}

    @property
    def card(self) -> str:
        """Return the answer card the verdict step writes (before the check)."""
        return self.table("card", "json")

    def figure_inputs(self) -> dict[str, list[str]]:
        """Return what the figures step reads, by name (its named inputs)."""
        return {
            **{n: self.measured[n] for n in ("launch", "decode", "collective")},
            **{n: [self.table(n)] for n in VERDICT_TABLES},
            "tune": self.measured["tune"],
        }

    def figures(self) -> list[str]:
        """Return the figures the figures step draws."""
        return [str(self.plots / f"{name}.png") for name in FIGURE_CATEGORIES]

    def report_inputs(self) -> dict[str, list[str]]:
        """Return what the report step reads, by name (its named inputs)."""
        return {
            **{n: self.measured[n] for n in ("launch", "decode", "collective", "power", "tune")},
            **{n: [self.table(n)] for n in VERDICT_TABLES},
            "panel": [self.table("question", "json")],
            "card": [self.card],
            "figures": self.figures(),
            "provenance": self.provenance,
            "dropins": self.dropins,
        }

    def joins(self) -> list[tuple[str, list[str]]]:
        """Return each joining step's keyed output with its inputs (cells.stale_join)."""
        flat = lambda named: [p for paths in named.values() for p in paths]  # noqa: E731
        return [
            (self.table("verdict"), flat(self.verdict_inputs())),
            (self.table("check"), flat(self.check_inputs())),
            (self.figures()[0], flat(self.figure_inputs())),
            (str(self.reports / "report.md"), flat(self.report_inputs())),
        ]

    def checked(self) -> list[str]:
        """Return every joining-step output a later step reads, each written with its record."""
        names = (*MEASURED_TABLES, *VERDICT_TABLES)
        return [
            *(self.table(n) for n in names),
            *(self.table(n, "parquet") for n in names),
            *self.provenance,
            self.table("fit", "json"),
            self.table("question", "json"),
            self.card,
            *self.figures(),
        ]

    def table(self, name: str, ext: str = "csv") -> str:
        """Return the path of one table this stage writes."""
        return str(self.tables / f"{name}.{ext}")

    def outputs(self) -> list[str]:
        """Return what `all` asks for in example mode: the re-rendered tables and reports."""
        return [
            *(self.table(name) for name in VERDICT_TABLES),
            *(str(self.reports / name) for name in REPORT_FILES),
            *backends.example_outputs(self.example),
        ]
