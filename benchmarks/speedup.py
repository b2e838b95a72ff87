"""Predicted speedups over data parallelism: expert, Parallax and PaSE (the paper's Fig. 6).

For each graph and p, every strategy is costed with the same cost model (the
original PaSE model, batch 128, 10 TFLOPS, 16 GB/s); the speedup of a
strategy is the data-parallel cost divided by its cost.  A `*` marks a
baseline that uses configurations outside the search space.  Then, for RNNLM
and the Transformer, how the search changes with --sparse-embeddings.

    pip install -r benchmarks/requirements.txt
    python benchmarks/speedup.py                    # tables + benchmarks/speedup.png
    python benchmarks/speedup.py --markdown --png benchmarks/speedup.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baselines import compare  # noqa: E402
from cost_model import CostModel, build_costs  # noqa: E402
from dp_search import search  # noqa: E402
from graph import build_graph, graph_names, operators  # noqa: E402
from table import render  # noqa: E402

SPARSE = CostModel(embedding_lookup=True, embedding_sync="best")


def speedups(graph: str, p: int, model: CostModel = CostModel()) -> dict:
    g = build_graph(graph)
    costed = build_costs(g, p, model)
    r = search(costed, 0)
    base = {b.key: b for b in compare(g, p, model)}
    dp = base["data_parallel"].total_cost
    row = {"graph": graph, "p": p, "pase_cost": r.cost, "pase": dp / r.cost, "strategy": r.strategy,
           "expert_label": base["expert"].label}
    for key, b in base.items():
        row[key] = dp / b.total_cost
        row[f"{key}_cost"] = b.total_cost
        row[f"{key}_inside"] = b.in_search_space
    return row


def speedup_table(rows, markdown):
    head = ["graph", "p", "data parallel", "expert", "Parallax", "PaSE", "PaSE cost (FLOP)"]

    def cell(r, key):
        return f"{r[key]:.2f}" + ("" if r.get(f"{key}_inside", True) else "*")

    lines = [[r["graph"], str(r["p"]), cell(r, "data_parallel"), cell(r, "expert"), cell(r, "parallax"),
              f"{r['pase']:.2f}", f"{r['pase_cost']:.4e}"] for r in rows]
    return render(head, lines, markdown)


def _embedding_configs(graph, strategy):
    g = build_graph(graph)
    return ", ".join(f"{op.name} {op.dims}=({','.join(map(str, c))})"
                     for op, c in zip(operators(g), strategy) if op.kind.sparse_rows)


def sparse_table(rows_dense, rows_sparse, markdown):
    head = ["graph", "p", "PaSE", "PaSE sparse", "Parallax sparse", "change", "embedding split: default",
            "with --sparse-embeddings"]
    lines = []
    for d, s in zip(rows_dense, rows_sparse):
        lines.append([d["graph"], str(d["p"]), f"{d['pase_cost']:.4e}", f"{s['pase_cost']:.4e}",
                      f"{s['parallax_cost']:.4e}" + ("" if s["parallax_inside"] else "*"),
                      f"{100 * (s['pase_cost'] / d['pase_cost'] - 1):+.1f}%",
                      _embedding_configs(d["graph"], d["strategy"]), _embedding_configs(s["graph"], s["strategy"])])
    return render(head, lines, markdown)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    fig, axes = plt.subplots(1, len(graphs), figsize=(3.2 * len(graphs), 3.4), sharey=False)
    axes = np.atleast_1d(axes)
    series = [("data_parallel", "data parallel", "#bbbbbb"), ("expert", "expert", "#4c72b0"),
              ("parallax", "Parallax", "#dd8452"), ("pase", "PaSE", "#55a868")]
    for ax, graph in zip(axes, graphs):
        rs = [r for r in rows if r["graph"] == graph]
        x = np.arange(len(rs))
        width = 0.2
        for i, (key, label, color) in enumerate(series):
            ax.bar(x + (i - 1.5) * width, [r[key] for r in rs], width, label=label, color=color)
        ax.set_xticks(x, [str(r["p"]) for r in rs])
        ax.set_xlabel("devices p")
        ax.set_title(graph)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("predicted speedup over data parallel")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Predicted speedup over data parallelism (PaSE cost model, batch 128, 10 TFLOPS, 16 GB/s)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=list(graph_names()), choices=graph_names())
    ap.add_argument("--procs", nargs="+", type=int, default=[4, 8, 16, 32, 64])
    ap.add_argument("--png", default=str(ROOT / "benchmarks" / "speedup.png"), help="bar chart to write")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    rows = [speedups(g, p) for g in args.graphs for p in args.procs]
    print("Speedup over data parallel (* = uses configurations outside the search space)")
    print(speedup_table(rows, args.markdown))
    plot(rows, args.png)
    print(f"\nWrote {args.png}")
    seq = [g for g in args.graphs if g in ("rnnlm", "transformer")]
    if seq:
        dense = [r for r in rows if r["graph"] in seq]
        sparse = [speedups(g, p, SPARSE) for g in seq for p in args.procs]
        print("\nWith --sparse-embeddings (costs in FLOP; Parallax costed with the same lookup compute)")
        print(sparse_table(dense, sparse, args.markdown))


if __name__ == "__main__":
    main()
