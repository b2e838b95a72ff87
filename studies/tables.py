"""A sweep's rows as a pandas DataFrame: printed, and written as CSV, JSON
or Markdown."""

from __future__ import annotations

import math

import pandas as pd

from errors import InputError, plain

__all__ = ["frame", "render", "render_file", "FORMATS"]

FORMATS = (".csv", ".json", ".md")


def frame(rows: list) -> pd.DataFrame:
    """The rows that ran, in order; columns as the rows name them."""
    df = pd.DataFrame([r for r in rows if r is not None])
    if "error" in df:  # last, whichever row came first
        df = df[[c for c in df.columns if c != "error"] + ([] if df["error"].isna().all() else ["error"])]
    if "largest_K" in df:
        df["largest_K"] = df["largest_K"].astype("Int64")  # a count, missing where the setting failed
    return df


def _seconds(t: float) -> str:
    from report import fmt_time

    return "-" if t is None or (isinstance(t, float) and math.isnan(t)) else fmt_time(t)


def _formatters(df: pd.DataFrame) -> dict:
    def num(fmt):
        return lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    out = {}
    for col in df.columns:
        if col in ("total_cost", "compute", "communication"):
            out[col] = num(".4e")
        elif col.endswith("speedup"):
            out[col] = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}x"
        elif col == "step_seconds":
            out[col] = _seconds
        elif col == "search_seconds":
            out[col] = num(".3f")
        elif col == "memory_gb":  # 3 digits, from 1,000 GB up in plain digits as the report writes them
            out[col] = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else plain(x, 3)
        elif col == "largest_K":
            out[col] = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else str(int(x))
        elif df[col].dtype.kind == "f":  # a swept setting (--bw 16,16.5): as given, not rounded
            out[col] = num(".15g")
    return out


def _no_fit(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The speedups over baselines that do not fit the device memory
    (``KEY_fits`` false) marked, the ``KEY_fits`` columns folded into them,
    and the lines that say what the marks mean: a baseline's own speedup
    reads ``no-fit``; the speedup over a data-parallel plan that does not
    fit carries a ``!``."""
    fits = [c for c in df.columns if c.endswith("_fits")]
    out, marks = df.drop(columns=fits), set()
    for col in fits:
        key = col.removesuffix("_fits")
        target = "speedup" if key == "data_parallel" else f"{key}_speedup"
        bad = [not (x is None or pd.isna(x) or bool(x)) for x in df[col]]  # a failed setting's: missing
        if target not in out or not any(bad):
            continue
        text = _formatters(df)[target]
        if key == "data_parallel":
            out[target] = [text(x) + ("!" if b else "") for x, b in zip(df[target], bad)]
        else:
            out[target] = ["no-fit" if b else text(x) for x, b in zip(df[target], bad)]
        marks.add(key == "data_parallel")
    notes = {True: "! over a data-parallel plan that does not fit the device memory",
             False: "no-fit: the baseline does not fit the device memory (the --output file keeps its speedup)"}
    return out, [notes[m] for m in (True, False) if m in marks]


def render(df: pd.DataFrame) -> str:
    """The table for the terminal: one line per setting, and what its marks
    mean (baselines that do not fit the device memory)."""
    if df.empty:
        return "(no setting finished)"
    marked, notes = _no_fit(df)
    names = {"step_seconds": "step time", "memory_gb": "memory GB", "search_seconds": "search s"}
    shown = marked.rename(columns=names)
    fmt = {names.get(k, k): f for k, f in _formatters(df).items() if k in marked and marked[k].dtype == df[k].dtype}
    return "\n".join([shown.to_string(index=False, formatters=fmt, na_rep="-")] + notes)


def render_file(df: pd.DataFrame, path: str) -> str:
    """The table in the format ``path``'s extension names (exact numbers)."""
    ext = path.lower()[path.rfind("."):]
    if ext == ".csv":
        return df.to_csv(index=False)
    if ext == ".json":  # every digit (pandas' own JSON keeps 10): missing values as null
        import json

        records = [{k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v) for k, v in rec.items()}
                   for rec in df.to_dict("records")]
        return json.dumps(records, indent=1) + "\n"
    if ext == ".md":
        return df.to_markdown(index=False, missingval="-") + "\n"
    raise InputError(f"a sweep's table is written as {', '.join(FORMATS)}, not {path!r}")
