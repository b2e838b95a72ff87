"""Where the cost goes: a result's compute, communication inside operators and
re-distribution on edges, grouped by operator kind and by layer group (the
name's first path component: ``layer3``, ``enc2``), and, against a baseline,
the layers where the two differ most.

A re-distribution is charged to the layer that reads the tensor.  Each
group's figure is the exact sum (``math.fsum``) of its layers', and the
``total`` row the exact sum of all layers', the report's totals; what
dropless expert layers wait on the host beyond them (``frameworks.host``)
is said below the tables.
"""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["layers_frame", "grouped", "against", "render", "table"]

PARTS = ("compute", "communication", "edges")
#: how each column of a breakdown is printed
FORMATS = {**{c: (lambda x: f"{x:.4e}") for c in (*PARTS, "total", "cost", "cost_baseline")},
           "share": lambda x: f"{100 * x:.1f}%", "difference": lambda x: f"{x:+.4e}"}


def layers_frame(result) -> pd.DataFrame:
    """One row per layer: its kind, group, configuration and cost parts
    per step (a pipeline's, or accumulated micro-batches', for all its
    micro-batches, each layer on its own stage's devices)."""
    edges = {}
    for _, v, c in result.edges:
        edges.setdefault(v, []).append(c)
    m = per_step(result)
    return pd.DataFrame([{
        "id": layer.id, "name": layer.name, "kind": layer.kind, "group": layer.name.split("/")[0].split(".")[0],
        "config": layer.config, "compute": m * layer.compute, "communication": m * layer.communication,
        "edges": m * math.fsum(edges.get(layer.id, ())),
    } for layer in result.layers])


def per_step(result) -> int:
    """How many times a step runs each of ``result``'s layers: a
    pipeline's (or accumulated micro-batches') layers are costed per
    micro-batch, and run for each of its micro-batches."""
    return result.pipeline.m if result.pipeline is not None else 1


def grouped(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """The parts summed by ``by`` (``kind`` or ``group``), in order of total
    cost, with each group's share, and a ``total`` row."""
    out = df.groupby(by, sort=False)[list(PARTS)].agg(math.fsum)
    out["total"] = [math.fsum(x) for x in out[list(PARTS)].itertuples(index=False)]
    total = {p: math.fsum(df[p]) for p in PARTS}
    total["total"] = math.fsum(total.values())
    out["share"] = out["total"] / total["total"] if total["total"] else 0.0
    out = out.sort_values("total", ascending=False)
    out.loc["total"] = {**total, "share": 1.0}
    return out


def against(result, baseline, top: int = 10) -> pd.DataFrame:
    """The plan and ``baseline`` joined on the layer id: the ``top`` layers
    whose costs (own and re-distribution in) differ most."""
    a, b = layers_frame(result), layers_frame(baseline)
    for df in (a, b):
        df["cost"] = [math.fsum(x) for x in df[list(PARTS)].itertuples(index=False)]
    joined = a[["id", "name", "kind", "config", "cost"]].merge(b[["id", "config", "cost"]], on="id",
                                                               suffixes=("", "_baseline"))
    joined["difference"] = joined["cost"] - joined["cost_baseline"]
    order = joined["difference"].abs().sort_values(ascending=False, kind="stable").index
    return joined.loc[order[:top]].reset_index(drop=True)


def table(df: pd.DataFrame, index: str | None = None, rename: dict | None = None) -> str:
    """A breakdown's frame as aligned text, each column in its format;
    ``index`` names the index when it is a column to show; ``rename``
    retitles columns."""
    from report import fmt_config

    if index is not None:
        df = df.reset_index().rename(columns={"index": index})
    fmt = {c: FORMATS.get(c, fmt_config if c.startswith("config") else None) for c in df.columns}
    rename = rename or {}
    return df.rename(columns=rename).to_string(
        index=False, formatters={rename.get(c, c): f for c, f in fmt.items() if f is not None})


def render(result, baseline=None) -> str:
    """The breakdown as text; with ``baseline``, the layers that differ most."""
    df = layers_frame(result)
    pipe = result.pipeline
    lines = ["", "Where the cost goes (FLOP per step; re-distribution charged to the layer that reads the tensor"
             + ("" if pipe is None else
                f"; each layer for all {pipe.m} micro-batches on its own stage's devices, so that the stages, "
                "running at once, add up to more than the step" if pipe.pp > 1 else
                f"; each layer for all {pipe.m} micro-batches" if pipe.m > 1 else "") + "):", "",
             table(grouped(df, "kind"), "kind"), "", table(grouped(df, "group"), "group")]
    # no operator's: the expert layers' wait on the host's launches (frameworks.host)
    if pipe is None and result.host > 0:
        total = math.fsum([*(x.compute + x.communication for x in result.layers), *(c for *_, c in result.edges)])
        lines += ["", f"Beyond the layers: the expert layers wait {result.host:.4e} on the host's launches (the "
                      f"step {math.fsum([total, result.host]):.4e})."]
    elif pipe is not None and any(st.host > 0 for st in pipe.stages):
        lines += ["", "Beyond the layers, per micro-batch: the expert layers of "
                  + "; ".join(f"stage {st.index} wait {st.host:.4e} on the host's launches (its time {st.time:.4e})"
                              for st in pipe.stages) + "."]
    if baseline is not None:
        lines += ["", f"Layers where the plan and {baseline.title} differ most:", "",
                  table(against(result, baseline), rename={"cost_baseline": f"cost ({baseline.key})",
                                                           "config_baseline": f"config ({baseline.key})"})]
    return "\n".join(lines)
