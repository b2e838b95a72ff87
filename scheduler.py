"""PaSE: find an efficient parallelization strategy for training a DNN on p devices.

A reimplementation of "PaSE: Parallelization Strategies for Efficient DNN
Training" (Elango, IPDPS 2021): builds the computation graph, costs every
configuration of every operator, and finds the exact minimum-cost strategy.

    python scheduler.py -g resnet101 -p 32
    python scheduler.py -g transformer -p 64 --output plan.json
    python scheduler.py --evaluate plan.json
    python scheduler.py -g alexnet -p 8 -d --measure
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

from graph import GRAPHS  # graph.py imports networkx only when a graph is built

DEFAULTS = {"graph": "alexnet", "procs": 32, "batch": 128, "flops": 10.0, "bw": 16.0, "algo": 0}
DOT_FILE = "graph.dot"
PROG = "scheduler.py"


class UsageError(ValueError):
    """A bad command line or input file: reported in one line."""


@dataclass(frozen=True)
class Settings:
    """Everything the command line asks for, checked and with defaults filled."""

    graph: str = DEFAULTS["graph"]
    procs: int = DEFAULTS["procs"]
    batch: int = DEFAULTS["batch"]
    width: int | None = None
    flops: float = DEFAULTS["flops"]
    bw: float = DEFAULTS["bw"]
    algo: int = DEFAULTS["algo"]
    profile: bool = False
    measure: bool = False
    dump_graph: bool = False
    output: str | None = None
    evaluate: str | None = None
    mem_limit_gb: float | None = None
    compare: bool = False
    sparse_embeddings: bool = False
    distinct_rows: int | None = None
    explicit: frozenset = field(default=frozenset(), compare=False)  # flags given on the command line


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0 < v <= 1e12):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number (at most 1e12)")
    return v


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Find the minimum-cost hybrid data/parameter-parallel strategy for training "
        "a DNN on p devices (PaSE, Elango, IPDPS 2021). Costs are in FLOP.",
        epilog="example: python scheduler.py -g resnet101 -p 32 --output plan.json",
    )
    a = p.add_argument
    a("-p", "--procs", type=_int, help="number of devices (default: 32)")
    a("-b", "--batch", type=_int, help="global mini-batch size (default: 128)")
    a("-m", "--model", type=_int, dest="width", metavar="WIDTH",
      help="model width of rnnlm (hidden units, default 2048) or transformer (embedding width, "
      "default 512; heads = width/64)")
    a("-g", "--graph", choices=GRAPHS, metavar="NAME",
      help=f"network to parallelize: {', '.join(GRAPHS)} (default: alexnet)")
    a("--flops", type=_positive_float, help="peak TFLOPS per device (default: 10.0)")
    a("--bw", type=_positive_float, help="peak interconnect bandwidth in GB/s (default: 16.0)")
    a("--algo", type=_int, choices=(0, 1),
      help="search order: 0 GENERATESEQ, 1 breadth-first (default: 0)")
    a("--profile", action="store_true", help="profile the search with cProfile and print the top entries")
    a("--measure", action="store_true", help="time 5 searches after 2 warm-up runs; print mean, min, max")
    a("-d", "--dump-graph", action="store_true", help=f"write the graph to ./{DOT_FILE} (Graphviz, via pydot)")
    a("--output", metavar="PATH", help="write the result to PATH: .json (full record) or .csv (layer rows)")
    a("--evaluate", metavar="PATH",
      help="cost the strategy in PATH (a JSON file with 'layers': [{'id', 'config'}]) instead of searching")
    a("--mem-limit", type=_positive_float, dest="mem_limit_gb", metavar="GB",
      help="memory the search may use, in GB (default: half the memory available now)")
    a("--compare", action="store_true",
      help="also cost data-parallel, expert and Parallax strategies and print predicted speedups")
    a("--sparse-embeddings", action="store_true",
      help="model embeddings as row lookups with sparse gradient exchange (default: the original one-hot GEMM)")
    a("--distinct-rows", type=_int, metavar="U",
      help="distinct vocabulary rows a device's tokens touch per step, for sparse embedding "
      "gradients (default: one per token)")
    return p


def parse_args(argv=None) -> Settings:
    ns = build_parser().parse_args(argv)
    given = {k for k, v in vars(ns).items() if v is not None and v is not False}
    values = {k: v for k, v in vars(ns).items() if v is not None}
    return Settings(**values, explicit=frozenset(given))


# -- input files ---------------------------------------------------------------


def _read_json(path: str, flag: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{flag}: {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag}: {path} is a directory") from None
    except OSError as e:
        raise UsageError(f"{flag}: cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag}: {path} is not a text file") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{flag}: {path} is not valid JSON (line {e.lineno} column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise UsageError(f"{flag}: {path} is nested too deeply to be a strategy file") from None
    except ValueError as e:  # e.g. an integer with thousands of digits
        raise UsageError(f"{flag}: {path} is not a usable JSON file ({e})") from None


def read_strategy_file(path: str) -> tuple[dict, list]:
    """The settings a strategy file records and its ``[(id, config), ...]``."""
    data = _read_json(path, "--evaluate")
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise UsageError(f"--evaluate: {path} has no \"layers\" list")
    layers = []
    for i, layer in enumerate(data["layers"]):
        if not isinstance(layer, dict) or "id" not in layer or "config" not in layer:
            raise UsageError(f"--evaluate: {path}: layers[{i}] needs an \"id\" and a \"config\"")
        lid, cfg = layer["id"], layer["config"]
        if isinstance(lid, bool) or not isinstance(lid, int):
            raise UsageError(f"--evaluate: {path}: layers[{i}] has id {lid!r}, not an integer")
        if not isinstance(cfg, list):
            raise UsageError(f"--evaluate: {path}: layer {lid} has config {cfg!r}, not a list of integers")
        layers.append((lid, cfg))
    keys = ("graph", "procs", "batch", "flops", "bw", "width", "distinct_rows", "embedding_lookup", "embedding_sync")
    recorded = {k: data[k] for k in keys if data.get(k) is not None}
    return recorded, layers


def _strategy_from_layers(g, layers, path: str) -> list:
    n = g.number_of_nodes()
    by_id = {}
    for lid, cfg in layers:
        if not 0 <= lid < n:
            raise UsageError(f"--evaluate: {path}: layer id {lid} is not a node of {g.graph['name']} (0..{n - 1})")
        if lid in by_id:
            raise UsageError(f"--evaluate: {path}: layer {lid} appears twice")
        by_id[lid] = cfg
    missing = [v for v in range(n) if v not in by_id]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise UsageError(f"--evaluate: {path}: {len(missing)} of the {n} operators of {g.graph['name']} "
                         f"have no configuration ({shown})")
    return [by_id[v] for v in range(n)]


# -- output files ---------------------------------------------------------------


def check_writable(path: str, flag: str) -> None:
    """Refuse, before any work, a path we could not write."""
    if not path:
        raise UsageError(f"{flag}: the path is empty")
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise UsageError(f"{flag}: {path} is a directory")
    if os.path.exists(target) and not os.path.isfile(target):  # /dev/null, a FIFO: written in place
        if not os.access(target, os.W_OK):
            raise UsageError(f"{flag}: {path} is not writable")
        return
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise UsageError(f"{flag}: directory {os.path.dirname(path) or '.'} does not exist")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{flag}: {path} is not writable")
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".pase-", suffix=".tmp"):
            pass
    except OSError as e:
        raise UsageError(f"{flag}: cannot write in {parent}: {e.strerror}") from None


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place,
    so that an error never leaves a half-written file.  A symbolic link is
    followed (the link stays), an existing file keeps its permissions, and a
    special file (``/dev/null``) is simply written."""
    import tempfile

    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(target, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        return
    mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".pase-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _dumps(obj, indent: int = 0) -> str:
    """JSON with one line per key and per list item of dicts: readable and diffable."""
    pad = " " * (indent + 2)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_dumps(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj)


LAYER_KEYS = ("id", "name", "op", "dims", "space", "config", "devices", "compute", "communication", "cost")


def render_csv(result: dict) -> str:
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(LAYER_KEYS)
    for layer in result["layers"]:
        w.writerow([json.dumps(layer[k]) if isinstance(layer[k], list) else layer[k] for k in LAYER_KEYS])
    return out.getvalue()


def render_dot(g) -> str:
    """The graph in Graphviz format: one node per operator, one edge per tensor."""
    import pydot

    dot = pydot.Dot(g.graph["name"], graph_type="digraph", rankdir="TB")
    dot.set_node_defaults(shape="box", fontname="Helvetica", fontsize="10")
    dot.set_edge_defaults(fontname="Helvetica", fontsize="9")
    for v in sorted(g.nodes):
        op = g.nodes[v]["op"]
        space = " ".join(f"{d}={s}" for d, s in zip(op.dims, op.space))
        dot.add_node(pydot.Node(str(v), label=f'"{v}: {op.name}\\n{op.kind}\\n{space}"'))
    for u, v, d in sorted(g.edges(data=True)):
        shape = "x".join(map(str, g.nodes[u]["op"].outputs[d["out"]].shape))
        dot.add_edge(pydot.Edge(str(u), str(v), label=f'"{shape}"'))
    return dot.to_string()


# -- the report ------------------------------------------------------------------


def _align(rows, right: set[int], sep: str = " ") -> list[str]:
    """Rows of cells as lines of aligned columns (``right``: right-aligned)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [sep.join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def _fmt_config(cfg) -> str:
    return "(" + ",".join(map(str, cfg)) + ")"


def render_report(result: dict) -> str:
    """The human-readable report: a row per operator, a summary, the total last."""
    r = result
    what = "strategy" if r["mode"] == "search" else "evaluation of a given strategy"
    width = f", width {r['width']}" if r.get("width") else ""
    head = [f"PaSE {what}: {r['graph']}, batch {r['batch']}{width}, p = {r['procs']}",
            f"{r['flops']:g} TFLOPS and {r['bw']:g} GB/s per device; costs in FLOP "
            f"(a word moved costs {r['word_cost']:g})"]
    rows = [("id", "name", "kind", "dims", "config", "dev", "cost")]
    for layer in r["layers"]:
        rows.append((str(layer["id"]), layer["name"], layer["op"], layer["dims"], _fmt_config(layer["config"]),
                     str(layer["devices"]), f"{layer['cost']:.3e}"))
    lines = head + [""] + _align(rows, right={0, 5, 6}) + [""]
    lines.append(f"Operators: {r['operators_cost']:.4e} (compute {r['compute']:.4e}, "
                 f"communication {r['communication'] - r['edges_cost']:.4e})")
    lines.append(f"Edges (re-distribution): {r['edges_cost']:.4e}")
    lines.extend(r.get("notes", []))
    lines.append(f"Total cost: {r['total_cost']:.2f}")
    return "\n".join(lines)


def _model_fields(model) -> dict:
    return {"embedding_lookup": model.embedding_lookup, "embedding_sync": model.embedding_sync,
            "distinct_rows": model.distinct_rows}


def make_result(s: Settings, g, strategy, model, mode: str, search_seconds=None, extra=None) -> dict:
    """The one record every output format is made from."""
    from cost_model import evaluate
    from graph import operators

    sc = evaluate(g, strategy, model)
    layers = []
    for v, (op, cfg) in enumerate(zip(operators(g), strategy)):
        layers.append({
            "id": v, "name": op.name, "op": op.kind, "dims": op.dims, "space": list(op.space),
            "config": list(cfg), "devices": math.prod(cfg), "compute": sc.compute[v],
            "communication": sc.comm[v], "cost": sc.compute[v] + sc.comm[v],
        })
    edges_cost = math.fsum(sc.edges.values())
    result = {
        "graph": s.graph, "procs": s.procs, "batch": s.batch, "width": g.graph.get("width"),
        "flops": s.flops, "bw": s.bw, "word_cost": model.word_cost,
        "algo": s.algo if mode == "search" else None, "mode": mode,
        **_model_fields(model),
        "total_cost": sc.total, "search_seconds": search_seconds,
        "compute": sc.compute_total, "communication": sc.comm_total, "edges_cost": edges_cost,
        "operators_cost": sc.total - edges_cost,
        "comm_bytes_per_device": 8.0 * sc.comm_total / model.word_cost,
        "layers": layers,
    }
    result.update(extra or {})
    return result


def _pct(a: float, b: float) -> str:
    return f"{100 * (b - a) / b:.1f}%"


def add_comparison(result: dict, s: Settings, g, model, costed) -> None:
    """Cost the baselines, add them to ``result`` and say how they compare."""
    from baselines import compare

    base = compare(g, s.procs, model, costed)
    dp_cost = base["data_parallel"].cost.total
    mine = result["total_cost"]
    result["speedup_over_data_parallel"] = dp_cost / mine
    mine_label = "PaSE" if result["mode"] == "search" else "this strategy"
    rows = [(mine_label, result, True)]
    records = {}
    notes = []
    for key, b in base.items():
        rec = make_result(s, g, b.strategy, b.model, "baseline")
        rec.update(label=b.label, in_search_space=b.in_space, speedup_over_data_parallel=dp_cost / b.cost.total)
        records[key] = rec
        rows.append((b.name, rec, b.in_space))
        if b.note:
            notes.append(f"  {b.note}")
        elif key == "expert":
            notes.append(f"  {b.label}")
        cheaper = b.cost.total < mine * (1 - 1e-12)
        if cheaper and key == "parallax" and model.original:
            notes.append(f"  Parallax is {_pct(b.cost.total, mine)} cheaper than {mine_label}: it exchanges embedding")
            notes.append("  gradients sparsely, which the default cost model (the original PaSE one) does")
            notes.append("  not model; --sparse-embeddings searches with that rule")
        elif cheaper and not b.in_space:
            notes.append(f"  {b.name} is {_pct(b.cost.total, mine)} cheaper than {mine_label}: it uses "
                         f"configurations outside the search space ({_outside(g, b.strategy, costed)})")
        elif cheaper:
            notes.append(f"  {b.name} is {_pct(b.cost.total, mine)} cheaper than {mine_label}")
    if any(not r[2] for r in rows[1:]):
        notes.append("  * uses configurations the search does not enumerate (below the cutoff)")
    result["baselines"] = records
    table = [("strategy", "total", "compute", "comm", "speedup", "comm/device")]
    for label, rec, inside in rows:
        table.append((label + ("" if inside else " *"), f"{rec['total_cost']:.3e}", f"{rec['compute']:.3e}",
                      f"{rec['communication']:.3e}", f"{dp_cost / rec['total_cost']:.2f}x",
                      _bytes(rec["comm_bytes_per_device"])))
    lines = ["", "Compared with baselines (FLOP per step; speedup = data-parallel cost / cost):"]
    lines += ["  " + line for line in _align(table, right={1, 2, 3, 4, 5}, sep="  ")]
    result.setdefault("notes", []).extend(lines + notes)


def _outside(g, strategy, costed) -> str:
    """A configuration of ``strategy`` that the search space lacks, for the report."""
    from graph import operators

    v = costed.outside(strategy)
    op = operators(g)[v]
    return f"e.g. {op.name} {_fmt_config(strategy[v])} on {op.dims}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


# -- running ---------------------------------------------------------------------


class _Progress:
    """Progress on stderr, only when it is a terminal and the search is slow."""

    def __init__(self):
        self.on = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.shown = False

    def __call__(self, done, total):
        if not self.on:
            return
        now = time.perf_counter()
        if now - self.t0 > 1.0 and (now - self.last > 0.2 or done == total):
            self.last = now
            self.shown = True
            sys.stderr.write(f"\rsearching: {done}/{total} operators, {now - self.t0:.1f} s ")
            sys.stderr.flush()

    def close(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


def _with_file_settings(s: Settings, recorded: dict) -> Settings:
    """Flags not given on the command line come from the strategy file."""
    names = ("graph", "procs", "batch", "flops", "bw", "width", "distinct_rows")
    updates = {k: recorded[k] for k in names if k in recorded and k not in s.explicit}
    if "graph" in updates and updates["graph"] not in GRAPHS:
        raise UsageError(f"--evaluate: the file names an unknown graph {updates['graph']!r}")
    merged = replace(s, **updates)
    if "width" in updates and merged.graph not in ("rnnlm", "transformer"):
        raise UsageError(f"--evaluate: the file records a model width ({updates['width']!r}), "
                         f"but {merged.graph} has none")
    return merged


def _cost_model(s: Settings, recorded: dict):
    """The cost model the settings (and a strategy file's record) ask for."""
    from cost_model import CostModel

    rules = {}
    if s.sparse_embeddings:
        rules = {"embedding_lookup": True, "embedding_sync": "best"}
    elif "embedding_lookup" in recorded or "embedding_sync" in recorded:
        rules = {k: recorded[k] for k in ("embedding_lookup", "embedding_sync") if k in recorded}
        if not isinstance(rules.get("embedding_lookup", False), bool):
            raise UsageError(f"--evaluate: embedding_lookup must be true or false, not {rules['embedding_lookup']!r}")
    return CostModel(s.flops, s.bw, distinct_rows=s.distinct_rows, **rules)


def run(s: Settings, out=None) -> dict:
    """Do what the settings ask; return the result record.  Every check comes
    before any file is written."""
    out = sys.stdout if out is None else out
    if s.evaluate is not None and (s.profile or s.measure):
        raise UsageError("--profile and --measure time a search; they cannot be used with --evaluate")
    layers, recorded = None, {}
    if s.evaluate is not None:
        recorded, layers = read_strategy_file(s.evaluate)
        s = _with_file_settings(s, recorded)
    if s.output is not None:
        if not s.output.lower().endswith((".json", ".csv")):
            raise UsageError(f"--output: {s.output!r} must end in .json or .csv")
        check_writable(s.output, "--output")
    if s.dump_graph:
        check_writable(DOT_FILE, "--dump-graph")

    from cost_model import build_costs, check_procs
    from dp_search import default_memory_limit
    from graph import build_graph

    check_procs(s.procs)
    model = _cost_model(s, recorded)
    g = build_graph(s.graph, s.batch, s.width)
    limit = default_memory_limit() if s.mem_limit_gb is None else int(s.mem_limit_gb * 1e9)
    costed = None
    if layers is not None:
        from cost_model import check_strategy
        from graph import operators

        strategy = check_strategy(g, _strategy_from_layers(g, layers, s.evaluate))
        for v, (op, cfg) in enumerate(zip(operators(g), strategy)):
            if math.prod(cfg) > s.procs:
                raise UsageError(f"--evaluate: node {v} ({op.name}) config {tuple(cfg)} uses "
                                 f"{math.prod(cfg)} devices but p is {s.procs}")
        result = make_result(s, g, strategy, model, "evaluate",
                             extra={"notes": [f"Strategy read from {s.evaluate} (no search)."]})
    else:
        costed = build_costs(g, s.procs, model, memory_limit=limit)
        result = _search(s, g, model, costed, limit, out)
    if s.compare:
        add_comparison(result, s, g, model, costed or build_costs(g, s.procs, model, memory_limit=limit))
    if not math.isfinite(result["total_cost"]):
        raise ValueError("the total cost is not a finite number; choose realistic --flops and --bw")
    if s.output is not None:
        text = render_csv(result) if s.output.lower().endswith(".csv") else _dumps(_public(result)) + "\n"
        write_atomic(s.output, text)
    if s.dump_graph:
        write_atomic(DOT_FILE, render_dot(g))
        print(f"Wrote the graph ({g.number_of_nodes()} operators, {g.number_of_edges()} edges) to "
              f"{os.path.abspath(DOT_FILE)}", file=out)
    print(render_report(result), file=out)
    return result


def _public(result: dict) -> dict:
    """The record as written to JSON: without the report's prose."""
    out = {k: v for k, v in result.items() if k not in ("notes", "mode")}
    if "baselines" in out:
        out["baselines"] = {k: _public(v) for k, v in out["baselines"].items()}
    return out


def _search(s: Settings, g, model, costed, limit, out) -> dict:
    from dp_search import ALGOS, search

    def once(progress=None):
        return search(costed, s.algo, memory_limit=limit, progress=progress)

    notes = []
    if s.profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        r = once()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(15)
        print("Profile of the search (top 15 by cumulative time):", file=out)
        print(buf.getvalue().strip("\n"), file=out)
        print(file=out)
    else:
        progress = _Progress()
        try:
            r = once(progress)
        finally:
            progress.close()
    if s.measure:
        for _ in range(2):
            once()
        times = [once().seconds for _ in range(5)]
        notes.append(f"Timed 5 searches (after 2 warm-up): mean {sum(times) / 5:.4f} s, "
                     f"min {min(times):.4f} s, max {max(times):.4f} s")
    st = r.stats
    notes[:0] = [f"Search: {ALGOS[s.algo]}, {r.seconds:.3f} s for {costed.n} operators",
                 f"  largest K {st['K']}, largest dependent set {st['M']}, "
                 f"largest table {st['largest_table']:,} entries"]
    return make_result(s, g, r.strategy, model, "search", search_seconds=r.seconds,
                       extra={"notes": notes, "search": {"order": "GENERATESEQ" if s.algo == 0 else "breadth-first",
                                                         "largest_K": st["K"],
                                                         "largest_dependent_set": st["M"],
                                                         "largest_table": st["largest_table"],
                                                         "work": st["work"]}})


def main(argv=None) -> int:
    if sys.stdout is None:  # started with stdout closed: the report goes nowhere
        sys.stdout = open(os.devnull, "w")
    s = parse_args(argv)
    try:
        run(s)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, MemoryError, OSError) as e:  # our own one-line messages
        msg = str(e) or type(e).__name__
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
