"""Plans within the device memory: cost and memory of the unconstrained
optimum, of data parallelism, and of the search held within 80, 40 and 24 GB
(and tighter capacities where those all fit), with the search time and the
bound the Lagrangian search certifies.

    python benchmarks/memory.py                      # Transformer, p = 64, bf16, Adam
    python benchmarks/memory.py -g transformer tests/data/configs/llama3-8b/config.json --seq 2048 --markdown
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baselines import data_parallel  # noqa: E402
from cluster import Cluster  # noqa: E402
from cost_model import CostModel, build_costs, evaluate  # noqa: E402
from dp_search import DoesNotFit, search, search_within  # noqa: E402
from models import build_graph  # noqa: E402
from report import fmt_bytes  # noqa: E402
from table import render  # noqa: E402


def memory_of(sc, model) -> float:
    return sum(sum(model.memory_bytes(w, a)) for w, a in zip(sc.weights, sc.activations))


def rows_for(source: str, p: int, capacities, model: CostModel, params: dict) -> list[list[str]]:
    g = build_graph(source, **params)
    name = g.graph["name"] + (f", batch {params['batch']}" if "batch" in params else "")
    t0 = time.perf_counter()
    costed = build_costs(g, p, model)
    build_s = time.perf_counter() - t0
    free = search(costed, 0)
    free_mem = sum(costed.memory[v][i] for v, i in enumerate(free.index))
    dp = evaluate(g, data_parallel(g, p), model)
    rows = [[name, "unconstrained optimum", f"{free.cost:.4e}", fmt_bytes(free_mem), "exact",
             f"{free.seconds:.2f}", "1.0"],
            [name, "data parallel", f"{dp.total:.4e}", fmt_bytes(memory_of(dp, model)), "", "", ""]]
    extra = [c for c in capacities if c * 1e9 < free_mem]
    if not extra:  # every listed capacity fits the unconstrained optimum: show the bound at work too
        capacities = list(capacities) + [round(f * free_mem / 1e9, 2) for f in (0.8, 0.6, 0.45)]
    for cap in capacities:
        t0 = time.perf_counter()
        try:
            b = search_within(costed, cap * 1e9)
        except DoesNotFit as e:
            rows.append([name, f"within {cap:g} GB", "-", f"needs {fmt_bytes(e.least)}", "nothing fits", "", ""])
            continue
        secs = time.perf_counter() - t0
        status = {"unconstrained optimum fits": "fits: exact", "optimal": "optimal"}.get(
            b.status, f"within {100 * b.gap:.2f}%")
        rows.append([name, f"within {cap:g} GB", f"{b.cost:.4e}", fmt_bytes(b.memory), status, f"{secs:.2f}",
                     f"{secs / free.seconds:.1f}"])
    print(f"{name}: graph and costs {build_s:.2f} s", file=sys.stderr)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-g", "--graphs", nargs="+", default=["transformer"])
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("--seq", type=int, default=None, help="sequence length of models read from files")
    ap.add_argument("-b", "--batch", type=int, default=None, help="batch (default: each model's)")
    ap.add_argument("--capacities", nargs="+", type=float, default=[80, 40, 24])
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--device", default="a100-80gb")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    from cluster.config import resolve

    cluster = resolve({"precision": args.precision}, device=args.device)
    model = CostModel(Cluster(cluster.flops, cluster.bw, precision=args.precision, device=cluster.device),
                      optimizer=args.optimizer)
    rows = []
    for source in args.graphs:
        params = {} if args.batch is None else {"batch": args.batch}
        if args.seq is not None and source.endswith((".json", ".onnx")):  # the built-in models keep theirs
            params["seq"] = args.seq
        rows += rows_for(source, args.p, args.capacities, model, params)
    head = ["model", f"strategy (p = {args.p}, {args.precision}, {args.optimizer})", "cost (FLOP)",
            "memory per device", "bound", "search s", "x unconstrained"]
    print(render(head, rows, args.markdown, left=2))


if __name__ == "__main__":
    main()
