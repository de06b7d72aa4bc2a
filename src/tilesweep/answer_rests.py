"""What the answer card's picks rest on, in one line: the fit and where it was measured, the
expert GEMMs' efficiency, the kernel list and host term where named, modelled or measured
collectives, the check of this fit and the engines' figures beside it; read from the verdict
rows' own `inputs` and columns (by name: extra columns are ignored, missing ones are a gap)."""

from __future__ import annotations

import re

import pandas as pd

from tilesweep import references
from tilesweep.answer_picks import Pick, finite, fitting_rows, number

# Items of a verdict row's `inputs` (key before ':' or '=') the card names when present: the
# efficiency the expert GEMMs take, and the kernel list and host term where the verdict has them.
NAMED_ITEMS = ("expert GEMMs", "kernel list", "kernels", "host")


def input_items(text: str) -> list[str]:
    """Return a verdict row's `inputs` split into its items: on '; ' outside brackets, so a
    label's own '; ' (inside its parentheses) stays in it, and a clause with no key of its own
    stays with the item before it."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == ";" and depth == 0 and text[i + 1 : i + 2] == " ":
            items.append(text[start:i].strip())
            start = i + 2
    items.append(text[start:].strip())
    out: list[str] = []
    for item in (x for x in items if x):
        # An item with no key of its own ('the bf16 step's efficiency applied ...') goes on
        # saying the one before it.
        if out and not re.search(r"[:=]", item):
            out[-1] += "; " + item
        else:
            out.append(item)
    return out


def _key(item: str) -> str:
    """Return an input item's key: the text before its first ':' or '='."""
    return re.split(r"[:=]", item, maxsplit=1)[0].strip()


def _value(item: str) -> str:
    """Return an input item's value: the text after its first ':' or '='."""
    parts = re.split(r"[:=]", item, maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else item


def fit_labels(inputs: str) -> list[str]:
    """Return the fit labels ('launch-aware fit on ... at batches [...]', with where it was
    shipped from) a row's inputs name, each once, in order."""
    found = []
    for m in re.finditer(r"\((launch-aware fit on )", inputs):
        depth, i = 1, m.end()
        while i < len(inputs) and depth:
            depth += {"(": 1, ")": -1}.get(inputs[i], 0)
            i += 1
        label = inputs[m.start() + 1 : i - 1]
        if label not in found:
            found.append(label)
    return found


def _fit_words(inputs: str) -> str:
    """Return which fit the parts rest on, or that they are at the roofline alone and why."""
    labels = fit_labels(inputs)
    if labels:
        return "parts composed from the " + " and the ".join(labels)
    for item in input_items(inputs):
        if item.startswith("parts at the target's roofline"):
            return item
    return "parts at the target's roofline alone (no fit named in the verdict's inputs)"


def collective_words(inputs: str) -> str:
    """Return whether the collectives are modelled or measured, and where from."""
    for item in input_items(inputs):
        if _key(item) == "interconnect":
            value = _value(item)
            if "measured on" in value:
                return f"collectives measured ({value})"
            what, _, where = value.partition(" (")
            where = f"from {where.rstrip(')')} " if where else ""
            return f"collectives modelled {where}({what}), not measured"
    return "collectives: not named in the verdict's inputs"


def _varying(rows: list[dict], key: str) -> str:
    """Return one named input item over the picked rows: once where all agree, else per batch
    (first and last)."""
    values = []
    for rec in rows:
        found = [x for x in input_items(str(rec.get("inputs") or "")) if _key(x).startswith(key)]
        if found:
            values.append((rec["batch"], "; ".join(found)))
    if not values:
        return ""
    distinct = list(dict.fromkeys(v for _, v in values))
    if len(distinct) == 1:
        return distinct[0]
    (b0, first), (b1, last) = values[0], values[-1]
    return f"{first} at batch {b0} ... {_value(last)} at batch {b1}"


def _column_words(rows: list[dict]) -> list[str]:
    """Return the host term and kernel list where the verdict carries them as columns."""
    out = []
    host = [float(r["host_ms"]) for r in rows if finite(r.get("host_ms"))]
    if host:
        span = (
            number(min(host))
            if min(host) == max(host)
            else f"{number(min(host))}-{number(max(host))}"
        )
        out.append(f"host term {span} ms per step (verdict host_ms)")
    lists = list(dict.fromkeys(str(r["kernel_list"]) for r in rows if r.get("kernel_list")))
    lists = [x for x in lists if x and x != "nan"]
    if lists:
        out.append("kernel list " + ", ".join(lists))
    return out


def _check_words(check: pd.DataFrame, labels: list[str]) -> str:
    """Return what the check says of this fit: the held-out error and over which steps, or that
    the check tests another fit (one made on another device) and so says nothing of this one."""
    if check is None or check.empty or "composed_error_pct" not in check:
        return "check: no whole step measured"
    err = _held_out_errors(check)
    device = ", ".join(sorted(set(check.get("device", pd.Series(["?"])).dropna().astype(str))))
    checked = (
        set(check["composed_label"].dropna().astype(str)) if "composed_label" in check else set()
    )
    same = any(lab.split(";")[0] in c for lab in labels for c in checked)
    if labels and not same:
        return (
            f"check: none of this fit (the {len(check)} whole steps measured on {device} test a "
            "fit made there, not this one)"
        )
    if err.empty:
        return f"check: no held-out whole step on {device}"
    low, high = f"{err.min():+.0f}%", f"{err.max():+.0f}%"
    spread = low if low == high else f"{low} to {high}"
    return (
        f"check: composed {spread} off {len(err)} held-out whole steps measured on {device} "
        "(one rank each, collectives left out)"
    )


def _engine_words(engines: pd.DataFrame | None, model: str, hardware: str) -> str:
    """Return the engine check: the engines' published TPOT beside the composition (same model,
    the same hardware first), each ratio named as composed over engine."""
    if engines is None or engines.empty or "composed_over_engine" not in engines:
        return "engine check: none cited"
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
    BAND, corpus_summary = references.BAND, references.corpus_summary

    got = corpus_summary(engines)
    corpus = (
        f"{got['in_band']} of {got['composed']} held-out engine figures within "
        f"{BAND[0]}-{BAND[1]}x (median |error| {got['median_abs_error_pct']:.0f}%"
        + (f"; {got['contradicted']} contradicted by its own source" if got["contradicted"] else "")
        + "); "
        if got.get("composed")
        else ""
    )
    return (
        "engine check: " + corpus + "; ".join(parts) + more if parts else "engine check: none cited"
    )


def rests_on(
    verdict: pd.DataFrame,
    picks: list[Pick],
    check: pd.DataFrame | None,
    engines: pd.DataFrame | None,
) -> str:
    """Return the one line naming what the picks rest on: the fit and where it was measured, the
    expert GEMMs' efficiency, the kernel list and host term where named, modelled or measured
    collectives, the check of this fit and the engines' figures beside it."""
    fits = fitting_rows(verdict)
    chosen = [
        r
        for p in picks
        for r in fits.to_dict("records")
        if str(r["layout"]) == p.layout and int(r["batch"]) == p.batch
    ]
    if not chosen:
        return "nothing: no layout is composed"
    inputs = str(chosen[0].get("inputs") or "")
    labels = fit_labels(inputs)
    model = str(chosen[0].get("model", "?"))
    hardware = str(chosen[0].get("hardware", "?"))
    parts = [_fit_words(inputs)]
    parts += [x for x in (_varying(chosen, key) for key in NAMED_ITEMS) if x]
    named = {p.split(":")[0] for p in parts}
    parts += [
        w
        for w in _column_words(chosen)
        if " ".join(w.split()[:2]) not in named and w.split()[0] not in named
    ]
    parts.append(collective_words(inputs))
    if check is not None:  # None: composed before the whole steps were checked (card_json)
        parts.append(_check_words(check, labels))
    parts.append(_engine_words(engines, model, hardware))
    return "; ".join(parts) + "."


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
