"""Where the joining rules (tables, verdict, figures, report) read and write: a sweep's results,
or a kept example folder re-rendered with `--config example=FOLDER`."""

from __future__ import annotations

from pathlib import Path

# The measured tables the tables step joins from the per-cell outputs.
MEASURED_TABLES = ("launch", "decode", "collective", "layout", "power", "tune")
# A kept example's own record of the overrides it was made with.
EXAMPLE_OVERRIDES = "overrides.yaml"


def example_overrides(folder: str) -> list[str]:
    """Return the overrides a kept example was made with (its overrides.yaml), so that
    `--config example=FOLDER` alone re-renders it with the same config."""
    from omegaconf import OmegaConf

    from tilesweep.errors import ConfigError

    path = Path(folder) / EXAMPLE_OVERRIDES
    if not path.is_file():
        raise ConfigError(
            f"example={folder}: no {EXAMPLE_OVERRIDES} there (a kept example has one)"
        )
    return [str(o) for o in OmegaConf.to_container(OmegaConf.load(path)).get("overrides", [])]


class Stage5:
    """Where the verdict, figure and report steps read and write: a sweep's results (tables/,
    plots/, the reports at the top), or a kept example folder (`--config example=FOLDER`),
    whose measured tables (launch, decode, collective, layout, power, tune_<dtype>, ceilings)
    lie beside the verdict, figures and reports re-rendered from them."""

    def __init__(self, sweep, example: str | None = None):
        self.example = example
        if example:
            folder = Path(example)
            self.tables, self.plots, self.reports = folder, folder / "plots", folder
            self.measured = {n: [str(folder / f"{n}.csv")] for n in MEASURED_TABLES[:-1]}
            self.measured["tune"] = [str(p) for p in sorted(folder.glob("tune_*.csv"))]
            self.ceilings = [str(folder / "ceilings.json")]
            self.provenance: list[str] = []
        else:
            self.tables, self.plots = sweep.results / "tables", sweep.results / "plots"
            self.reports = sweep.results
            self.measured = {n: [str(self.tables / f"{n}.csv")] for n in MEASURED_TABLES}
            self.ceilings = [sweep.path("device", "ceilings.json")]
            self.provenance = [str(self.tables / "provenance.json")]
        fit = sweep.shipped_fit()
        # A kept example's own fit is the verdict's output there, never its input.
        self.shipped_fit = [
            f for f in fit if Path(f).resolve() != (self.tables / "fit.json").resolve()
        ]
        self.parquet = not example

    def table(self, name: str, ext: str = "csv") -> str:
        """Return the path of one table this stage writes."""
        return str(self.tables / f"{name}.{ext}")

    def outputs(self) -> list[str]:
        """Return what `all` asks for in example mode: the re-rendered tables and reports."""
        return [
            self.table("verdict"),
            self.table("check"),
            str(self.reports / "report.md"),
            str(self.reports / "report.html"),
        ]
