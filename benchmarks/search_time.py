"""Search time and memory for every graph and p: the analogue of the paper's Table I.

For each graph and p it reports, for GENERATESEQ (--algo 0): the largest
configuration count K before and after dominance pruning and the share
of all configurations kept, the largest
dependent set M, the largest table, the table entries the dynamic program
evaluates without and with pruning, the time to build the graph and all
its cost arrays, the pruning time, the search time (pruning included, best
of --repeat in-process runs, numba already loaded), the time per entry
evaluated (the dynamic program alone) and the contraction that ran (numpy
or the fused kernel);
the whole `scheduler.py` process (wall time, best of the same number of
runs, and peak RSS); and for the
breadth-first order (--algo 1, p <= 64) its search time or the memory it
would need when that exceeds the limit.

Whole processes run as users run them: the child writes bytecode (the
benchmark drops PYTHONDONTWRITEBYTECODE from its environment) and one
warm-up run precedes the measured one, so bytecode and the fused kernel's
machine code are cached.

    python benchmarks/search_time.py                 # p = 4..64, plus 128 ... 1024
    python benchmarks/search_time.py --procs 8 16 --large --graphs alexnet resnet101
    python benchmarks/search_time.py --markdown      # the table for docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cost_model import build_costs  # noqa: E402
from dp_search import SearchTooLarge, breadth_first, elimination, search  # noqa: E402
from models import build_graph, graph_names  # noqa: E402
from search.contract import fused_available  # noqa: E402
from table import render  # noqa: E402

# A small launcher runs scheduler.py and reports the child's own rusage: a
# child forked straight from this (large) process would inherit its RSS peak.
_LAUNCHER = """
import os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), time.perf_counter() - t0, usage.ru_maxrss)
"""
BFS_UP_TO = 64  # the breadth-first order is measured up to this p


def process_run(graph: str, p: int, *flags: str, repeat: int = 1) -> tuple[float, float]:
    """Wall seconds (best of ``repeat``) and peak RSS (MB, the largest) of a
    `scheduler.py -g graph -p p [flags]` process, after a warm-up run, with
    bytecode written as users' Pythons do."""
    cmd = [sys.executable, "-c", _LAUNCHER, sys.executable, str(ROOT / "scheduler.py"), "-g", graph, "-p", str(p),
           *flags]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for _ in range(1 + repeat):  # the first run warms the caches
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        code, seconds, maxrss_kb = out.stdout.split()
        if code != "0":
            raise RuntimeError(f"scheduler.py -g {graph} -p {p} {' '.join(flags)} failed (exit status {code})")
        runs.append((float(seconds), int(maxrss_kb) / 1024))  # ru_maxrss is in KB on Linux
    return min(s for s, _ in runs[1:]), max(m for _, m in runs[1:])


def measure(graph: str, p: int, repeat: int, limit: int, whole_process: bool) -> dict:
    t0 = time.perf_counter()
    g = build_graph(graph)
    costed = build_costs(g, p, memory_limit=limit)
    cost_seconds = time.perf_counter() - t0  # the graph and every cost array
    runs = [search(costed, 0, memory_limit=limit) for _ in range(repeat)]
    r = min(runs, key=lambda x: x.seconds)
    st = r.stats
    row = {"graph": graph, "p": p, "K": st.largest_K, "K_pruned": st.largest_K_pruned,
           "kept": st.configurations_kept / st.configurations, "M": st.largest_dependent_set,
           "table": st.largest_table, "work_unpruned": st.work_unpruned, "work": st.work, "costs_s": cost_seconds,
           "prune_s": st.prune_seconds, "search_s": st.seconds, "kernel": st.kernel}
    row["ns_per_entry"] = 1e9 * (st.seconds - st.prune_seconds) / max(st.work, 1)
    row["process_s"], row["rss_mb"] = process_run(graph, p, repeat=repeat) if whole_process else (None, None)
    row["M1"], row["bfs_s"], row["bfs_need_gb"] = None, None, None
    if p <= BFS_UP_TO:
        edges = list(costed.edge_costs)
        sizes = [len(c) for c in costed.configs]
        row["M1"] = elimination(breadth_first(costed.n, edges)[0], sizes, edges).largest_dependent_set
        try:
            row["bfs_s"] = search(costed, 1, memory_limit=limit).seconds
        except SearchTooLarge as e:
            row["bfs_need_gb"] = float(str(e).split("needs ")[1].split(" GB")[0])
    return row


def _num(x: float) -> str:
    return f"{x:.3g}" if x < 1e6 else f"{x:.2e}"


def format_rows(rows: list[dict], markdown: bool) -> str:
    head = ["graph", "p", "K", "K pruned", "kept", "M", "largest table", "entries unpruned", "entries", "graph+costs s",
            "prune s", "search s", "ns/entry", "kernel", "process s", "peak RSS MB", "BFS M", "BFS search"]
    lines = []
    for r in rows:
        if r["bfs_s"] is not None:
            bfs = f"{r['bfs_s']:.3f} s"
        elif r["bfs_need_gb"] is not None:
            bfs = f"refused: needs {_num(r['bfs_need_gb'])} GB"
        else:
            bfs = "-"
        lines.append([r["graph"], str(r["p"]), str(r["K"]), str(r["K_pruned"]), f"{100 * r['kept']:.0f}%", str(r["M"]),
                      f"{r['table']:,}",
                      _num(r["work_unpruned"]), _num(r["work"]), f"{r['costs_s']:.3f}", f"{r['prune_s']:.3f}",
                      f"{r['search_s']:.3f}", f"{r['ns_per_entry']:.2f}", r["kernel"],
                      "-" if r["process_s"] is None else f"{r['process_s']:.2f}",
                      "-" if r["rss_mb"] is None else f"{r['rss_mb']:.0f}",
                      "-" if r["M1"] is None else str(r["M1"]), bfs])
    return render(head, lines, markdown)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=list(graph_names()), choices=graph_names())
    ap.add_argument("--procs", nargs="+", type=int, default=[4, 8, 16, 32, 64])
    ap.add_argument("--large", nargs="*", type=int, default=[128, 256, 512, 1024],
                    help="extra p for graphs whose search stays under --large-budget seconds")
    ap.add_argument("--large-budget", type=float, default=120.0)
    ap.add_argument("--repeat", type=int, default=3, help="in-process searches per setting (best is kept)")
    ap.add_argument("--mem-limit", type=float, default=8.0, help="GB the searches may use")
    ap.add_argument("--no-process", action="store_true", help="skip the whole-process runs")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    limit = int(args.mem_limit * 1e9)
    fused_available()  # load numba once: in-process times leave it out, whole processes include it
    rows = []
    for graph in args.graphs:
        last = None
        for p in list(args.procs) + list(args.large):
            if p in args.large and last is not None and last["search_s"] * 12 > args.large_budget:
                continue  # the search grows about K^(M+1): this p would exceed the budget
            last = measure(graph, p, args.repeat if p not in args.large else 2, limit, not args.no_process)
            rows.append(last)
            print(format_rows([last], False).splitlines()[1], file=sys.stderr, flush=True)
    print(format_rows(rows, args.markdown))


if __name__ == "__main__":
    main()
