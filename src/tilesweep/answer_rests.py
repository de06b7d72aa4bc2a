"""What the answer card's picks rest on, clause by clause, read from the verdict rows' own items
(plan.row_inputs) and columns (extra columns ignored, missing ones a gap)."""

import pandas as pd

from tilesweep import references
from tilesweep.answer_picks import Pick, finite, fitting_rows, number
from tilesweep.plan import row_inputs

# Items of a verdict row the card names when present: the efficiency the expert GEMMs take, and
# the kernel list and host term.
NAMED_ITEMS = ("expert GEMMs", "kernel list", "host")
# The item a row composed at the target's roofline alone carries (why no fit is used).
ROOFLINE = "parts at the target's roofline"


def _fit_words(items: dict[str, str]) -> dict[str, str]:
    if "fit" in items:
        shipped = {"fit file": items["fit file"]} if "fit file" in items else {}
        return {"fit": f"parts composed from the {items['fit']}"} | shipped
    if ROOFLINE in items:
        return {"fit": f"{ROOFLINE}: {items[ROOFLINE]}"}
    return {"fit": f"{ROOFLINE} alone (no fit named in the verdict's inputs)"}


def collective_words(items: dict[str, str]) -> str:
    """Return whether the collectives are modelled or measured, and where from."""
    if "interconnect" not in items:
        return "collectives: not named in the verdict's inputs"
    what, where = items["interconnect"], items.get("interconnect from")
    if where is None:
        return f"collectives measured ({what})"
    return f"collectives modelled from {where} ({what}), not measured"


def _varying(rows: list[dict], key: str) -> str:
    """Return one named item over the picked rows: once where all agree, else first and last."""
    values = [(r["batch"], items[key]) for r in rows if key in (items := row_inputs.of(r))]
    if not values:
        return ""
    if len(dict.fromkeys(v for _, v in values)) == 1:
        return f"{key}: {values[0][1]}"
    (b0, first), (b1, last) = values[0], values[-1]
    return f"{key}: {first} at batch {b0} ... {last} at batch {b1}"


def _column_words(rows: list[dict]) -> dict[str, str]:
    out = {}
    host = [float(r["host_ms"]) for r in rows if finite(r.get("host_ms"))]
    if host:
        low, high = number(min(host)), number(max(host))
        span = low if min(host) == max(host) else f"{low}-{high}"
        out["host"] = f"host term {span} ms per step (verdict host_ms)"
    lists = list(dict.fromkeys(str(r["kernel_list"]) for r in rows if r.get("kernel_list")))
    lists = [x for x in lists if x and x != "nan"]
    if lists:
        out["kernel list"] = "kernel list " + ", ".join(lists)
    return out


def _check_words(check: pd.DataFrame, fit: str) -> str:
    """Return what the check says of this fit: its held-out error, or that it tests another fit."""
    if check is None or check.empty or "composed_error_pct" not in check:
        return "check: no whole step measured"
    err = _held_out_errors(check)
    device = ", ".join(sorted(set(check.get("device", pd.Series(["?"])).dropna().astype(str))))
    checked = (
        set(check["composed_label"].dropna().astype(str)) if "composed_label" in check else set()
    )
    if fit and not any(fit in c for c in checked):
        return (
            f"check: none of this fit (the {len(check)} whole steps measured on {device} test a "
            "fit made there, not this one)"
        )
    if err.empty:
        return f"check: no held-out whole step on {device}"
    return (
        f"check: composed {spread(err)} off {len(err)} held-out whole steps measured on {device} "
        "(one rank each, collectives left out)"
    )


def _engine_words(engines: pd.DataFrame | None, model: str, hardware: str) -> dict[str, str]:
    """Return the engine check: the corpus' agreement and the engines' TPOT beside it."""
    none = {"engine check": "engine check: none cited"}
    if engines is None or engines.empty or "composed_over_engine" not in engines:
        return none
    rows = engines[pd.to_numeric(engines["composed_over_engine"], errors="coerce").notna()]
    if "model" in rows:
        same = rows[rows["model"].astype(str) == model]
        rows = same if not same.empty else rows
    if "hardware" in rows:
        rows = rows.assign(_here=rows["hardware"].astype(str) == hardware)
        rows = rows.sort_values("_here", ascending=False, kind="stable")
    parts = [
        f"{r.get('engine', '?')} {r.get('model', '?')} {r.get('layout', '?')} on "
        f"{r.get('hardware', '?')} at batch {r.get('batch', '?')}: composed "
        f"{number(r.get('composed_tpot_ms'))} ms vs its {number(r.get('engine_tpot_ms'))} ms "
        f"({float(r['composed_over_engine']):.2f}x)"
        for r in rows.head(2).to_dict("records")
    ]
    more = f" (+{len(rows) - 2} more in engines.csv)" if len(rows) > 2 else ""
    if not parts:
        return none
    got, band = references.corpus_summary(engines), references.BAND
    corpus = []
    if got.get("composed"):
        contradicted = got["contradicted"]
        corpus.append(
            f"{got['in_band']} of {got['composed']} cited engine figures within "
            f"{band[0]}-{band[1]}x (median |error| {got['median_abs_error_pct']:.0f}%"
            + (f"; {contradicted} contradicted by its own source" if contradicted else "")
            + ")"
        )
    first, *rest = corpus + parts
    out = {"engine check": f"engine check: {first}"}
    return out | ({"engine figures": "; ".join(rest) + more} if rest else {})


def rests_on(
    verdict: pd.DataFrame,
    picks: list[Pick],
    check: pd.DataFrame | None,
    engines: pd.DataFrame | None,
) -> dict[str, str]:
    """Return what the picks rest on, clause by clause (key -> words)."""
    fits = fitting_rows(verdict)
    chosen = [
        r
        for p in picks
        for r in fits.to_dict("records")
        if str(r["layout"]) == p.layout and int(r["batch"]) == p.batch
    ]
    if not chosen:
        return {"fit": "nothing: no layout is composed"}
    items = row_inputs.of(chosen[0])
    model = str(chosen[0].get("model", "?"))
    hardware = str(chosen[0].get("hardware", "?"))
    out = _fit_words(items)
    out |= {key: words for key in NAMED_ITEMS if (words := _varying(chosen, key))}
    for key, words in _column_words(chosen).items():
        out.setdefault(key, words)
    out["collectives"] = collective_words(items)
    if check is not None:  # None: composed before the whole steps were checked (card_json)
        out["check"] = _check_words(check, items.get("fit", ""))
    return out | _engine_words(engines, model, hardware)


def spread(err: pd.Series) -> str:
    """Return '-14% to +1%' (or one figure) for a set of percentage errors."""
    low, high = f"{err.min():+.0f}%", f"{err.max():+.0f}%"
    return low if low == high else f"{low} to {high}"


def _held_out_errors(check: pd.DataFrame) -> pd.Series:
    """Return the composed error (%) of the check's held-out rows (every row where unmarked)."""
    held = check
    if "held_out" in check:
        held = check[check["held_out"].astype(str).str.lower() == "true"]
    return pd.to_numeric(held["composed_error_pct"], errors="coerce").dropna()


def check_range(check: pd.DataFrame | None) -> tuple[float, float] | None:
    """Return the held-out check's composed error range in percent, or None."""
    if check is None or check.empty or "composed_error_pct" not in check:
        return None
    err = _held_out_errors(check)
    return (round(float(err.min()), 2), round(float(err.max()), 2)) if len(err) else None
