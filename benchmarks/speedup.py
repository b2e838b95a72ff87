"""Predicted speedups over data parallelism: expert, Parallax and PaSE (the paper's Fig. 6).

A thin call of the tool's sweep (``scheduler.py -g ... -p 4,...,64 --compare``):
for each graph and p, every strategy is costed with the same cost model (the
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
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli import parse_args  # noqa: E402
from cli.study import sweep  # noqa: E402
from models import graph_names  # noqa: E402
from table import render  # noqa: E402


def speedups(graphs, procs, *flags):
    """The sweep's table (one row per graph and p, with the baselines and
    each row's plan)."""
    sw = sweep(parse_args(["-g", ",".join(graphs), "-p", ",".join(map(str, procs)), "--compare", *flags]),
               keep_plans=True)
    sw.table["plan"] = [json.loads(outcome[1]) for outcome in sw.outcomes]
    return sw.table


def speedup_table(df, markdown):
    head = ["graph", "p", "data parallel", "expert", "Parallax", "PaSE", "PaSE cost (FLOP)"]

    def cell(r, key):
        value = 1.0 if key == "data_parallel" else r[f"{key}_speedup"]
        return f"{value:.2f}" + ("" if r[f"{key}_inside"] else "*")

    lines = [[r["graph"], str(r["procs"]), cell(r, "data_parallel"), cell(r, "expert"), cell(r, "parallax"),
              f"{r['speedup']:.2f}", f"{r['total_cost']:.4e}"] for _, r in df.iterrows()]
    return render(head, lines, markdown)


def _embedding_configs(plan):
    return ", ".join(f"{layer['name']} {layer['dims']}=({','.join(map(str, layer['config']))})"
                     for layer in plan["layers"] if layer["op"] == "Embedding")


def sparse_table(dense, sparse, markdown):
    head = ["graph", "p", "PaSE", "PaSE sparse", "Parallax sparse", "change", "embedding split: default",
            "with --sparse-embeddings"]
    lines = []
    for (_, d), (_, s) in zip(dense.iterrows(), sparse.iterrows()):
        parallax = s["total_cost"] * s["speedup"] / s["parallax_speedup"]  # its cost: data parallel's / its speedup
        lines.append([d["graph"], str(d["procs"]), f"{d['total_cost']:.4e}", f"{s['total_cost']:.4e}",
                      f"{parallax:.4e}" + ("" if s["parallax_inside"] else "*"),
                      f"{100 * (s['total_cost'] / d['total_cost'] - 1):+.1f}%",
                      _embedding_configs(d["plan"]), _embedding_configs(s["plan"])])
    return render(head, lines, markdown)


def plot(df, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    graphs = list(dict.fromkeys(df["graph"]))
    fig, axes = plt.subplots(1, len(graphs), figsize=(3.2 * len(graphs), 3.4), sharey=False)
    axes = np.atleast_1d(axes)
    series = [("data_parallel", "data parallel", "#bbbbbb"), ("expert", "expert", "#4c72b0"),
              ("parallax", "Parallax", "#dd8452"), ("pase", "PaSE", "#55a868")]
    for ax, graph in zip(axes, graphs):
        rs = df[df["graph"] == graph]
        x = np.arange(len(rs))
        width = 0.2
        for i, (key, label, color) in enumerate(series):
            heights = {"data_parallel": np.ones(len(rs)), "pase": rs["speedup"]}.get(key)
            heights = rs[f"{key}_speedup"] if heights is None else heights
            ax.bar(x + (i - 1.5) * width, heights, width, label=label, color=color)
        ax.set_xticks(x, [str(p) for p in rs["procs"]])
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
    seq = [g for g in args.graphs if g in ("rnnlm", "transformer")]
    df = speedups(args.graphs, args.procs)
    print("Speedup over data parallel (* = uses configurations outside the search space)")
    print(speedup_table(df, args.markdown))
    plot(df, args.png)
    print(f"\nWrote {args.png}")
    if seq:
        dense = df[df["graph"].isin(seq)]
        sparse = speedups(seq, args.procs, "--sparse-embeddings")
        print("\nWith --sparse-embeddings (costs in FLOP; Parallax costed with the same lookup compute)")
        print(sparse_table(dense, sparse, args.markdown))


if __name__ == "__main__":
    main()
