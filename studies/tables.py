"""A sweep's rows as a pandas DataFrame: printed, and written as CSV, JSON
or Markdown."""

from __future__ import annotations

import math

import pandas as pd

from errors import InputError

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
        elif col == "memory_gb":
            out[col] = num(".3g")
        elif col == "largest_K":
            out[col] = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else str(int(x))
        elif df[col].dtype.kind == "f":  # a swept setting (--bw 16,16.5): as given, not rounded
            out[col] = num(".15g")
    return out


def render(df: pd.DataFrame) -> str:
    """The table for the terminal: one line per setting."""
    if df.empty:
        return "(no setting finished)"
    shown = df.rename(columns={"step_seconds": "step time", "memory_gb": "memory GB",
                               "search_seconds": "search s"})
    fmt = {{"step_seconds": "step time", "memory_gb": "memory GB", "search_seconds": "search s"}.get(k, k): f
           for k, f in _formatters(df).items()}
    return shown.to_string(index=False, formatters=fmt, na_rep="-")


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
