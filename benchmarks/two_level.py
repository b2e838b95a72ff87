"""Plans on a two-level cluster: the searched strategy against data parallel
and expert, with predicted step times, and what the second level costs the
search.

For each graph and cluster (G = 8 devices per node, nodes joined 10 times
slower than the links inside a node), the searched strategy, data parallel
and the expert baseline are costed on that cluster; the flat network's
optimum (searched as if every link ran at the intra-node speed) is costed on
it too, to show what planning without the second level would lose.  Search
times are the best of --repeat in-process searches, flat and two-level.

    python benchmarks/two_level.py                   # the table for benchmarks/README.md
    python benchmarks/two_level.py --markdown
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baselines import data_parallel, expert  # noqa: E402
from cluster import Cluster  # noqa: E402
from cost_model import CostModel, build_costs, evaluate  # noqa: E402
from dp_search import search  # noqa: E402
from models import build_graph  # noqa: E402
from report import fmt_time  # noqa: E402
from table import render  # noqa: E402

CLUSTERS = {
    "paper device, 16 / 1.6 GB/s": Cluster(10, 16, inter_bw=1.6, gpus_per_node=8),
    "a100-80gb bf16, 300 / 30 GB/s, 5 us": Cluster(312, 300, inter_bw=30, gpus_per_node=8, latency=5,
                                                   memory=80, precision="bf16", device="a100-80gb"),
}


def best_search(costed, repeat):
    runs = [search(costed, 0) for _ in range(repeat)]
    return min(runs, key=lambda r: r.seconds)


def rows_for(graph: str, p: int, label: str, two: Cluster, repeat: int) -> list[list[str]]:
    g = build_graph(graph)
    flat_model, model = CostModel(replace(two, gpus_per_node=None, inter_bw=None)), CostModel(two)
    flat = best_search(build_costs(g, p, flat_model), repeat)
    mine = best_search(build_costs(g, p, model), repeat)
    ex, ex_label = expert(g, p, model)
    plans = [("PaSE (two-level search)", mine.strategy), ("PaSE (flat search)", flat.strategy),
             ("data parallel", data_parallel(g, p)), (f"expert ({ex_label})", ex)]
    dp = evaluate(g, plans[2][1], model).total
    out = []
    for name, strategy in plans:
        cost = evaluate(g, strategy, model).total
        out.append([graph, label, name, f"{cost:.4e}", fmt_time(two.seconds(cost)), f"{dp / cost:.2f}x",
                    f"{flat.seconds:.3f} / {mine.seconds:.3f}" if name.startswith("PaSE (two") else ""])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=["transformer", "resnet101"])
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    rows = [r for graph in args.graphs for label, c in CLUSTERS.items() for r in rows_for(graph, args.p, label, c,
                                                                                           args.repeat)]
    head = ["graph", "cluster (G = 8, p = %d)" % args.p, "strategy", "cost (FLOP)", "step time",
            "speedup over data parallel", "search s: flat / two-level"]
    print(render(head, rows, args.markdown, left=3))


if __name__ == "__main__":
    main()
