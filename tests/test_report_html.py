"""The HTML report: written by the tiny sweep, self-contained, and rendered by a real browser."""

from __future__ import annotations

import base64
import html
import io
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import snakemake
from matplotlib import image as mpimg

from tilesweep import deployment_verdict
from tilesweep.config import compose, compose_settings
from tilesweep.report import analysis, contents, measurement_sections
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.report.decode_figures import decode_roofline, decode_time
from tilesweep.report.document import FIGURES, Figure, Table
from tilesweep.report.machine_figures import collective_bandwidth, launch_smem
from tilesweep.report.plotting import png
from tilesweep.report.step_figures import check_error, verdict_split
from tilesweep.settings import RootSettings
from tilesweep.stages.tables import arrow_safe

SECTIONS = [key for key, _ in contents.sections()]
TABLES = ("launch", "decode", "collective", "verdict", "check", "power")
TYPED_BRIEF = compose_settings(["references=none"])  # the stub held no engine figures
BRIEF = compose([])  # the default sweep's deployment: GLM-5 NVFP4 on RTX PRO 6000
CPU = {"device": "cpu", "device_kind": "cpu", "copy_gbs": 10.0, "matmul_tflops": {"bf16": 0.2}}
# Appended to a copy of the report: records, once the page has loaded, how many images decoded.
IMAGE_CHECK = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter((i) => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);
  const out = document.createElement("div");
  out.id = "image-check";
  out.textContent = ok.length + "/" + imgs.length;
  const width = document.createElement("div");
  width.id = "page-width";
  width.textContent = String(document.documentElement.scrollWidth);
  document.body.appendChild(out);
  document.body.appendChild(width);
});
</script>"""


def blocks_of(data, kind) -> list:
    """Return the blocks of one kind in a report's sections, in order."""
    return [b for s in data.sections for b in s.blocks if isinstance(b, kind)]


def settings_stub() -> RootSettings:
    """Return the settings the HTML report reads: the default sweep's, with the brief's
    question."""
    return TYPED_BRIEF


def png_images(page: str) -> list[bytes]:
    """Return every inline image of a page, decoded."""
    found = re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', page)
    return [base64.b64decode(data) for data in found]


# ---- the page the tiny sweep writes -------------------------------------------------------


@pytest.mark.slow
def test_sweep_writes_a_self_contained_report(tiny_sweep):
    results = tiny_sweep / "results"
    page = (results / "report.html").read_text()
    for key in ["brief", *SECTIONS]:
        assert f'<section id="{key}">' in page
    assert "<script" not in page and "<link" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "the page must not load anything"
    images = png_images(page)
    assert len(images) >= 5
    for data in images:
        pixels = mpimg.imread(io.BytesIO(data), format="png")
        assert pixels.shape[0] > 50 and pixels.shape[1] > 50
    for name in FIGURES:
        assert (results / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tp2-pp1-ep1" in page  # the summary names every layout


@pytest.mark.slow
def test_parquet_tables_hold_the_csv_rows(tiny_sweep):
    tables = tiny_sweep / "results" / "tables"
    for name in TABLES:
        csv = pd.read_csv(tables / f"{name}.csv")
        parquet = pd.read_parquet(tables / f"{name}.parquet")
        assert list(parquet.columns) == list(csv.columns)
        assert len(parquet) == len(csv)


@pytest.mark.slow
def test_snakemake_report_registers_the_figures(tiny_sweep, tmp_path):
    out = tmp_path / "snakemake-report.html"
    snakemake(tiny_sweep, "--cores", "1", "--report", str(out), overrides=["experiment=tiny"])
    text = out.read_text()
    for name in FIGURES:
        assert f'"results/plots/{name}.png"' in text
    captions = Path(__file__).resolve().parents[1] / "workflow" / "report"
    for name in FIGURES:
        first_line = (captions / f"{name}.rst").read_text().splitlines()[0]
        assert first_line.replace("'", "&#x27;") in text or first_line in text, name


# ---- a real browser ------------------------------------------------------------------------


def chromium() -> str:
    """Return a headless-capable Chromium binary; skip the test when none is on PATH."""
    names = [os.environ.get("TILESWEEP_CHROMIUM", ""), "chromium", "chromium-browser"]
    found = next((shutil.which(n) for n in names if n and shutil.which(n)), None)
    if not found:
        pytest.skip(
            "chromium is not on PATH (or TILESWEEP_CHROMIUM): `make bootstrap` installs it "
            "as root on Debian, or run `apt-get install chromium`"
        )
    return found


def browse(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Open a page in headless Chromium with no network, sync or first-run side effects."""
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tiny_sweep, tmp_path):
    page = (tiny_sweep / "results" / "report.html").read_text()
    checked = tmp_path / "report.html"
    checked.write_text(page.replace("</body>", IMAGE_CHECK + "</body>"))
    dom = browse(
        checked,
        tmp_path / "profile",
        "--window-size=1280,2400",
        "--virtual-time-budget=10000",
        "--dump-dom",
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    for key, title in contents.sections():
        assert re.search(rf'<section id="{key}"><h2>{re.escape(title)}', dom.stdout), key
    count = re.search(r'<div id="image-check">(\d+)/(\d+)</div>', dom.stdout)
    assert count, "the page's load event never fired"
    loaded, total = map(int, count.groups())
    assert total == len(png_images(page)) and total >= 5
    assert loaded == total, f"only {loaded} of {total} images decoded"
    width = re.search(r'<div id="page-width">(\d+)</div>', dom.stdout)
    assert width and int(width.group(1)) <= 1280, "the page overflows a 1,280 px window"

    shot = tmp_path / "shot.png"
    browse(checked, tmp_path / "profile2", "--window-size=1280,2400", f"--screenshot={shot}")
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2400, 1280)
    assert pixels[..., :3].std() > 0.05, "the screenshot is blank"


# ---- the page's parts, on small tables -----------------------------------------------------


def launch_rows() -> pd.DataFrame:
    """Return launch rows like the pipeline's: one fits, one needs opt-in, one does not fit."""
    base = {
        "target": "rtx_pro_6000",
        "arch": "sm_120",
        "dtype": "nvfp4",
        "epilogue": "finalize",
        "smem_limit_bytes": 101376,
        "smem_default_bytes": 49152,
        "smem_per_sm_bytes": 102400,
        "source": "cutlass-types",
        "backend": "cutlass",
    }
    rows = [
        dict(base, tile_m=128, tile_n=128, tile_k=128, smem_bytes=40960, fits="default"),
        dict(base, tile_m=128, tile_n=128, tile_k=256, smem_bytes=90112, fits="optin"),
        dict(
            base,
            tile_m=128,
            tile_n=256,
            tile_k=128,
            smem_bytes=158720,
            fits="no",
            status="launch",
            overshoot_bytes=57344,
            reason="needs 158,720 B > 101,376 B <script>alert(1)</script>",
        ),
    ]
    frame = pd.DataFrame(rows)
    frame["status"] = frame["status"].fillna("ok")
    frame["kernel"] = ["a", "b", "c"]
    frame["stages"] = [4, "auto", 2]
    frame["smem_model_bytes"] = [51200, 69632, 158720]
    frame["mainloop_smem_bytes"] = [32768, 81920, 92160]
    frame["epilogue_smem_bytes"] = [8192, 8192, 66560]
    return frame


def verdict_rows() -> pd.DataFrame:
    """Return the brief's composed verdict (roofline, a CPU at hand): rows that fit and not."""
    return deployment_verdict.deployment_table(
        RootSettings.model_validate(BRIEF), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU
    )


def brief_panel() -> dict:
    """Return the question's panel for verdict_rows()."""
    typed = RootSettings.model_validate(BRIEF)
    return deployment_verdict.question_panel(typed, lambda s: deployment_verdict.deployment_table(
        s, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU))  # fmt: skip


def page_of(*tables: pd.DataFrame) -> str:
    """Return the HTML page of (launch, decode, collective, verdict) tables."""
    return report_html.render(contents.build(settings_stub(), *tables, {}))


def test_report_escapes_text_and_keeps_going_with_empty_tables():
    empty = pd.DataFrame()
    page = page_of(launch_rows(), empty, empty, empty)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    for key in SECTIONS:
        assert f'<section id="{key}">' in page
    # The question's panel appears only for the question's deployment (a panel is given), and
    # the page links to no section it does not hold.
    assert '<section id="brief">' not in page and '<a href="#brief">' not in page
    assert set(re.findall(r'href="#([^"]+)"', page)) <= set(re.findall(r'id="([^"]+)"', page))
    # launch, and the rest saying "empty"; the engines' figure stands in their part, absent
    # without cited figures
    assert len(png_images(page)) == len(FIGURES) - 1


def test_report_labels_every_verdict_row_with_its_source():
    empty = pd.DataFrame()
    rows = verdict_rows()
    page = page_of(empty, empty, empty, rows)
    # The verdict table's rows: composed with the shipped fit where they fit, model where not.
    for source in ("model", "composed"):
        assert page.count(f'<tr class="src-{source}">') == (rows["source"] == source).sum()
    assert 'class="badge model"' in page and "does not fit" in page
    assert "memory_bandwidth_gbs: 1792 (hardware[rtx_pro_6000])" in page  # inputs and sources


def test_launch_failures_and_estimates():
    launch = launch_rows()
    fails = analysis.launch_failures(launch)
    assert list(fails["kernel"]) == ["c"]
    errors = analysis.estimate_errors(launch).set_index("kernel")
    assert errors.loc["a", "smem_model_error_pct"] == pytest.approx(25.0)
    counts = analysis.fit_counts(launch).iloc[0]
    assert (counts["default"], counts["optin"], counts["no"]) == (1, 1, 1)
    page = page_of(launch, *[pd.DataFrame()] * 3)
    assert (
        "rtx_pro_6000: of 3 kernels in the launch check, 1 fit by default, 1 only after opt-in, "
        "1 do not fit" in page
    )


def test_best_per_batch_compares_the_best_tile_with_the_best_baseline():
    rows = [
        ("cutlass:t1", 16, 2.0),
        ("triton:t2", 16, 1.0),
        ("torch_bmm", 16, 3.0),
        ("torch_matmul", 16, 4.0),
        ("torch_bmm", 32, 3.0),
    ]
    decode = pd.DataFrame(rows, columns=["runner", "tokens_per_expert", "time_ms"])
    decode = decode.assign(op="down", routing="uniform", status="ok", bound="memory")
    best = analysis.best_per_batch(decode).set_index("tokens_per_expert")
    assert best.loc[16, "best_runner"] == "triton:t2"
    assert best.loc[16, "best_baseline"] == "torch_bmm"
    assert best.loc[16, "speedup_vs_baseline"] == pytest.approx(3.0)
    assert math.isnan(best.loc[32, "speedup_vs_baseline"])  # no tile timed at 32


def test_every_figure_renders_from_empty_and_from_partial_tables():
    empty = pd.DataFrame()
    figures = [
        launch_smem(launch_rows()),
        launch_smem(empty),
        decode_time(empty),
        decode_roofline(pd.DataFrame({"status": ["ok"], "time_ms": [1.0]})),
        collective_bandwidth(empty),
        verdict_split(verdict_rows()),
        verdict_split(empty),
        check_error(empty),
    ]
    for fig in figures:
        assert png(fig)[:4] == b"\x89PNG"


def test_mixed_type_columns_survive_parquet(tmp_path):
    frame = launch_rows()  # `stages` holds 4, "auto", 2 like CUTLASS's StageCountAuto rows
    path = tmp_path / "launch.parquet"
    arrow_safe(frame).to_parquet(path, index=False)
    back = pd.read_parquet(path)
    assert list(back["stages"]) == ["4", "auto", "2"]
    assert back["smem_bytes"].tolist() == frame["smem_bytes"].tolist()


# ---- both reports render one ReportData ----------------------------------------------------


def decode_rows() -> pd.DataFrame:
    """Return decode rows of two dtypes: tiles, a baseline, a failed and an untimed row."""
    rows = [
        ("triton:a", "bf16", 16, 1.0, "ok"),
        ("triton:b", "bf16", 16, 0.8, "ok"),
        ("torch_bmm", "bf16", 16, 1.2, "ok"),
        ("triton:c", "bf16", 16, 0.1, "launch"),  # failed: never the fastest
        ("triton:f", "fp8", 16, 0.5, "ok"),
        ("triton:g", "fp8", 16, math.nan, "ok"),  # no time: never the fastest
    ]
    frame = pd.DataFrame(
        rows, columns=["runner", "dtype", "tokens_per_expert", "time_ms", "status"]
    )
    return frame.assign(op="down", routing="uniform", bound="memory", reason="", device="dev")


def test_markdown_and_html_show_the_same_sections_tables_and_figures():
    empty = pd.DataFrame()
    engines = pd.read_csv(EXAMPLE / "engines.csv").head(6)  # the engines' part and figure
    data = contents.build(
        settings_stub(), launch_rows(), decode_rows(), empty, verdict_rows(), {},
        panel=brief_panel(), engines=engines,
    )  # fmt: skip
    text, page = report_md.render(data), report_html.render(data)
    md_titles = re.findall(r"^## (.+)$", text, flags=re.M)
    html_titles = [html.unescape(t) for t in re.findall(r"<h2>([^<]+)</h2>", page)]
    question = BRIEF["question"]["title"]
    titles = [title for _, title in contents.sections()]
    assert md_titles == html_titles == [titles[0], question, *titles[1:]]  # the answer first
    for item in blocks_of(data, Table):
        if item.title:
            assert f"#### {item.title}" in text or item.collapsed
            assert html.escape(item.title, quote=True) in page
        for col in item.shown() if not item.frame.empty else []:
            assert f"| {col} |" in text or f" {col} |" in text, col
            assert f"<th>{html.escape(col)}</th>" in page, col
    # The answer, then the panel, then the machine that ran the sweep.
    assert text.index(f"## {titles[0]}") < text.index("## The brief's question")
    assert text.index("## The brief's question") < text.index(f"## {titles[1]}")
    assert "Which layout wins, and by how much" in text and "Which layout wins" in page
    names = [b.name for b in blocks_of(data, Figure)]
    assert names == list(FIGURES)
    for name in names:
        assert f"`{name}`" in text
    images = png_images(page)
    assert images == [data.figures[n] for n in names]
    for image in images:  # each decodes to a real picture, not just a PNG header
        pixels = mpimg.imread(io.BytesIO(image), format="png")
        assert pixels.shape[0] > 50 and pixels.shape[1] > 200


def test_best_per_batch_carries_the_dtype_and_the_same_numbers_in_both_reports():
    empty = pd.DataFrame()
    data = contents.build(settings_stub(), empty, decode_rows(), empty, empty, {}, figures={})
    best = analysis.best_per_batch(decode_rows()).set_index("dtype")
    assert best.loc["bf16", "best_runner"] == "triton:b"  # c failed, so it is not the fastest
    assert best.loc["bf16", "speedup_vs_baseline"] == pytest.approx(1.5)
    assert best.loc["fp8", "best_runner"] == "triton:f"  # g has no time
    assert math.isnan(best.loc["fp8", "speedup_vs_baseline"])  # no fp8 baseline to compare
    text, page = report_md.render(data), report_html.render(data)
    assert "| bf16 | down | uniform | 16 | triton:b | 0.8 |" in text
    assert '<td class="text">bf16</td>' in page and "<td>1.5</td>" in page
    assert "| fp8 | down | uniform | 16 | triton:f | 0.5 |" in text


def test_html_tables_scroll_in_their_own_box_and_the_page_does_not():
    empty = pd.DataFrame()
    page = page_of(launch_rows(), decode_rows(), empty, verdict_rows())
    tables = page.count("<table>")
    assert tables > 5 and page.count('<div class="scroll"><table>') == tables
    assert ".scroll{overflow-x:auto" in page and "max-width:1200px" in page


# ---- wide tables: the columns each exists for come first -------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "h200"


def example_page() -> str:
    """Return the HTML page of the kept H200 example's check and engine tables (figures stubbed)."""
    check = pd.read_csv(EXAMPLE / "check.csv")
    engines = pd.read_csv(EXAMPLE / "engines.csv")
    empty = pd.DataFrame()
    stub = {name: png(verdict_split(empty)) for name in FIGURES}
    data = contents.build(settings_stub(), empty, empty, empty, empty, {}, figures=stub,
                          check=check, engines=engines)  # fmt: skip
    return report_html.render(data)


def headers(page: str) -> list[list[str]]:
    """Return each table's header cells, in page order."""
    return [
        re.findall(r"<th>([^<]*)</th>", head) for head in re.findall(r"<thead>(.*?)</thead>", page)
    ]


def test_the_wide_tables_list_their_key_columns_first():
    heads = headers(example_page())
    (check,) = [h for h in heads if "measured_ms" in h and "composed_ms" in h]
    (engines,) = [h for h in heads if "engine_tpot_ms" in h and "cited" in h]
    assert len(check) > 15 and len(engines) > 20  # wide: they scroll at 1,280 px
    assert check[:5] == ["layout", "batch", "measured_ms", "composed_ms", "composed_error_pct"]
    assert engines[:8] == [
        "engine", "model", "hardware", "layout", "batch", "engine_tpot_ms", "composed_tpot_ms",
        "composed_over_engine",
    ]  # fmt: skip


# ---- provenance: when, in human dates, and which gap is which --------------------------------


def test_provenance_gives_job_times_as_dates_and_says_which_tables_keep_none():
    decode = pd.DataFrame(
        {"device": "NVIDIA H200", "status": "ok",
         "job_start_utc": ["2026-12-04T13:51:42.034371+00:00", "2026-12-04T13:52:00.1+00:00"],
         "job_end_utc": ["2026-12-04T13:53:01.5+00:00", "2026-12-04T13:55:21.632969+00:00"]}
    )  # fmt: skip
    check = pd.DataFrame({"layout": ["tp1"], "device": "NVIDIA H200"})
    empty = pd.DataFrame()
    blocks = measurement_sections.provenance_blocks(
        settings_stub(), empty, decode, empty, check, {"note": "re-rendered"}
    )
    when = {r["figure"]: r["measured"] for r in blocks[1].frame.to_dict("records")}
    assert when["decode_time, decode_roofline"] == (
        "2026-12-04 13:51 UTC to 2026-12-04 13:55 UTC (the rows' job times)"
    )
    assert when["check_error"] == "not kept with the tables"  # rows, but no time on them
    assert when["collective_bandwidth"] == when["launch_smem"] == "no rows measured"
    text = report_md.render(contents.build(settings_stub(), empty, decode, empty, empty, {}))
    assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", text)  # never raw microseconds
