"""What both reports show, built once: `build` turns the tables into one ReportData."""

import pandas as pd

from tilesweep import answer_card, backends
from tilesweep.report import measurement_sections
from tilesweep.report.analysis import latency_floors
from tilesweep.report.decode_figures import decode_roofline, decode_time
from tilesweep.report.document import FIGURES, SECTION_TITLES, TEXTS, ReportData, Section
from tilesweep.report.machine_figures import collective_bandwidth, deployment_target, launch_smem
from tilesweep.report.pareto_figure import pareto
from tilesweep.report.plotting import png
from tilesweep.report.sections import (
    check_blocks,
    power_blocks,
    question_blocks,
    summary_blocks,
    verdict_blocks,
)
from tilesweep.report.step_figures import check_error, engine_tpot, verdict_split
from tilesweep.settings import RootSettings
from tilesweep.settings.question_group import Question


def sections(tuned: list | None = None) -> tuple[tuple[str, str], ...]:
    """Return every section's (key, title) in order: SECTION_TITLES, the tuners' after decode."""
    # the question's own section (conf/question) goes after the first (build)
    tuned = backends.report_sections({}) if tuned is None else tuned
    own = [(key, title) for key, (title, _) in SECTION_TITLES.items()]
    after = [key for key, _ in own].index("decode") + 1
    return (*own[:after], *((key, t) for key, t, _, _ in tuned), *own[after:])


def draw_figures(
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    check: pd.DataFrame,
    engines: pd.DataFrame,
    tune: pd.DataFrame,
    names: list[str] | None = None,
) -> dict[str, bytes]:
    """Return the report figures as PNG bytes, by name (`names` only, when given)."""
    drawers = {
        "pareto": lambda: pareto(verdict),
        "launch_smem": lambda: launch_smem(launch, first=deployment_target(verdict)),
        "decode_time": lambda: decode_time(decode),
        "decode_roofline": lambda: decode_roofline(decode),
        "collective_bandwidth": lambda: collective_bandwidth(
            collective, latency_floors(collective)
        ),
        "verdict_split": lambda: verdict_split(verdict),
        "check_error": lambda: check_error(check),
        "engine_tpot": lambda: engine_tpot(engines),
    }
    for name, (_, _, _, draw) in backends.report_figures().items():
        drawers[name] = lambda draw=draw: draw({"tune": tune})
    return {name: png(drawers[name]()) for name in (all_figures() if names is None else names)}


def all_figures() -> list[str]:
    """Return the name of every figure a report may show: FIGURES, then the tuners' own."""
    return [*FIGURES, *backends.report_figures()]


def unasked(asked: Question | None, model: str, hardware: str) -> str:
    """Return why the question's panel is absent, or '' without a question."""
    if asked is None:
        return ""
    said = {"deployed": model, "deployed_on": hardware}
    return TEXTS["unasked"].format(**vars(asked), **said)


def _intro(settings: RootSettings) -> str:
    said = {"hardware": settings.hardware.name, "targets": ", ".join(settings.grid.targets)}
    return TEXTS["intro"].format(name=settings.model.name, **dict(settings.deployment), **said)


def _shown(blocks: dict, tuned: list, named: tuple) -> tuple[list[Section], list]:
    """Return the sections that have blocks, in order, and the navigation's link to each."""
    everyone = sections(tuned)
    order = (everyone[0], *named, *everyone[1:])
    shown = [Section(key, t, blocks[key]) for key, t in order if blocks[key]]
    # The question's link: its title up to the colon ("The brief's question").
    short = {key: s for key, (_, s) in SECTION_TITLES.items()} | {k: s for k, _, s, _ in tuned}
    short |= {key: t.split(":")[0] for key, t in named}
    return shown, [(s.key, short.get(s.key, s.title)) for s in shown]


def build(
    settings: RootSettings,
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    provenance: dict,
    figures: dict[str, bytes] | None = None,
    check: pd.DataFrame | None = None,
    power: pd.DataFrame | None = None,
    panel: dict | None = None,
    tune: pd.DataFrame | None = None,
    engines: pd.DataFrame | None = None,
    card: answer_card.AnswerCard | None = None,
    dropins: pd.DataFrame | None = None,
) -> ReportData:
    """Return the one ReportData both reports render, opened by the answer card."""
    empty = pd.DataFrame()
    check, engines, power, tune, dropins = (
        empty if t is None else t for t in (check, engines, power, tune, dropins)
    )
    model, hardware = settings.model, settings.hardware.name
    asked = settings.question.case
    named = ((asked.name, asked.title),) if asked and panel else ()
    why = "" if panel else unasked(asked, model.name, hardware)
    blocks = {
        **{key: question_blocks(asked, panel, launch, power) for key, _ in named},
        "summary": summary_blocks(verdict, why),
        "machine": measurement_sections.machine_blocks(decode, hardware),
        "verdict": verdict_blocks(verdict),
        "check": check_blocks(check, engines, verdict),
        "power": power_blocks(power, asked),
        "launch": measurement_sections.launch_blocks(launch, provenance, decode),
        "decode": measurement_sections.decode_blocks(decode, provenance),
        "collectives": measurement_sections.collective_blocks(
            collective, provenance, decode, verdict
        ),
        "provenance": measurement_sections.provenance_blocks(
            settings, launch, decode, collective, check, provenance
        ),
    }
    tuned = backends.report_sections({"tune": tune, "dropins": dropins})
    blocks.update({key: b for key, _, _, b in tuned})
    shown, nav = _shown(blocks, tuned, named)
    if card is None:
        card = answer_card.build(settings, verdict, check, engines)
    # every figure: those given, the others drawn from the tables
    given, tables = figures or {}, (launch, decode, collective, verdict, check)
    missing = [name for name in all_figures() if name not in given]
    return ReportData(
        card=card,
        title=f"tilesweep report: {model.name} on {hardware}",
        intro=_intro(settings),
        provenance=provenance,
        sections=shown,
        nav=nav,
        figures={**draw_figures(*tables, engines, tune, missing), **given},
    )
