"""A sweep's metric against its swept numeric axis (matplotlib, imported here
only): one line per combination of the other swept axes."""

from __future__ import annotations

from errors import InputError
from settings import DECLARED

__all__ = ["METRICS", "NUMERIC", "plot"]

#: --metric: the column plotted and its axis label
METRICS = {"speedup": ("speedup", "predicted speedup over data parallel"),
           "time": ("step_seconds", "predicted time of one training step (s)"),
           "cost": ("total_cost", "cost of one training step (FLOP)")}
#: swept axes that can be the x axis (the numeric settings), and their labels
NUMERIC = {s.name: s.label for s in DECLARED if s.sweep and s.label}


def x_axis(swept: list[str], values: dict | None = None) -> str:
    """The first swept numeric axis (in the sweep's axis order) whose
    ``values`` (axis -> its swept values, where known) are all numbers:
    ``--pp 1,2,auto`` has no place on one."""
    def numbers(axis):
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (values or {}).get(axis, ()))

    for axis in swept:
        if axis in NUMERIC and numbers(axis):
            return axis
    mixed = [a for a in swept if a in NUMERIC and not numbers(a)]
    flag = next((s.flags[-1] for s in DECLARED if mixed and s.name == mixed[0]), "")
    why = f"; {flag} takes values that are not numbers (auto has no place on an axis)" if mixed else ""
    raise InputError("a plot needs a swept numeric setting (-p, -b, -m, --seq, --flops, --bw, ...) for its x axis"
                     + why)


def plot(df, path: str, metric: str, swept: list[str], fixed: str = "") -> int:
    """Write the plot to ``path`` (.png or .svg); returns the number of lines."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("a plot needs matplotlib: pip install -r requirements.txt") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    column, ylabel = METRICS[metric]
    x = x_axis(swept, {a: list(df[a]) for a in swept if a in df})
    others = [a for a in swept if a != x]
    ok = df[df["error"].isna()] if "error" in df else df
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    groups = ok.groupby(others, sort=False) if others else [((), ok)]
    lines = 0
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(str(v) if a == "graph" else f"{a} {v:g}" if isinstance(v, float) else f"{a} {v}"
                          for a, v in zip(others, key)) or column
        part = part.sort_values(x)
        ax.plot(part[x], part[column], marker="o", label=label)
        lines += 1
    ax.set_xlabel(NUMERIC[x])
    ax.set_ylabel(ylabel)
    if x == "procs" or (len(ok) and ok[x].max() / max(ok[x].min(), 1e-300) >= 16):
        ax.set_xscale("log", base=2)
    ticks = sorted(set(ok[x]))
    if len(ticks) <= 12:  # the swept values themselves
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    if metric == "cost":
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if lines > 1:
        ax.legend(fontsize=8)
    title = f"{METRICS[metric][1].split(' (')[0]} against {NUMERIC[x]}".capitalize()
    ax.set_title(title + (f"\n{fixed}" if fixed else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return lines
