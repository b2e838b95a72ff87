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

from errors import SettingError
from models import MODELS  # the registry only: kinds, numpy and networkx load when a model is built

DEFAULTS = {"graph": "alexnet", "procs": 32, "flops": 10.0, "bw": 16.0, "algo": 0}
DOT_FILE = "graph.dot"
PROG = "scheduler.py"
MODEL_PARAMS = ("batch", "width", "seq", "vocab", "layers")  # the models' parameters the flags set
# Settings named by the library, and the flags that set them.
FLAGS = {"p": "-p", "batch": "-b", "width": "-m", "seq": "--seq", "vocab": "--vocab", "layers": "--layers",
         "graph": "-g", "algo": "--algo", "flops": "--flops", "bw": "--bw", "flops and bw": "--flops and --bw",
         "distinct_rows": "--distinct-rows", "embedding_sync": "--evaluate: embedding_sync",
         "embedding_lookup": "--evaluate: embedding_lookup"}


class UsageError(ValueError):
    """A bad command line or input file: reported in one line."""


@dataclass(frozen=True)
class Settings:
    """Everything the command line asks for, checked and with defaults filled."""

    graph: str = DEFAULTS["graph"]
    procs: int = DEFAULTS["procs"]
    batch: int | None = None  # model parameters: None keeps the model's default
    width: int | None = None
    seq: int | None = None
    vocab: int | None = None
    layers: int | None = None
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
    a("-g", "--graph", metavar="NAME",
      help=f"network to parallelize: {', '.join(MODELS)} (default: alexnet)")
    a("-b", "--batch", type=_int, help="global mini-batch size (default: 128)")
    a("-m", "--model", type=_int, dest="width", metavar="WIDTH",
      help="model width of rnnlm (hidden units, default 2048) or transformer (embedding width, "
      "default 512; heads = width/64)")
    a("--seq", type=_int, help="sequence length of rnnlm and transformer (default: 256)")
    a("--vocab", type=_int, help="vocabulary size of rnnlm (default 100000) and transformer (default 50000)")
    a("--layers", type=_int, help="layers of rnnlm (LSTM layers, default 2) and transformer "
      "(encoder and decoder layers each, default 6)")
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
      help="memory the cost arrays and the search may use, in GB (default: half the memory available now; "
      "the process itself needs up to 100 MB more)")
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
    keys = ("graph", "procs", "flops", "bw", "distinct_rows", "embedding_lookup", "embedding_sync", "batch", "width")
    recorded = {k: data[k] for k in keys if data.get(k) is not None}
    params = data.get("params")
    if isinstance(params, dict):  # the model's parameters (files written before it: batch, width only)
        recorded.update({k: v for k, v in params.items() if k in MODEL_PARAMS and v is not None})
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
    names = ("graph", "procs", "flops", "bw", "distinct_rows") + MODEL_PARAMS
    updates = {k: recorded[k] for k in names if k in recorded and k not in s.explicit}
    if "graph" in updates and updates["graph"] not in MODELS:
        raise UsageError(f"--evaluate: the file names an unknown graph {updates['graph']!r}")
    merged = replace(s, **updates)
    if merged.graph in MODELS:
        takes = {p.name for p in MODELS[merged.graph].params}
        stray = [k for k in MODEL_PARAMS if k in updates and k not in takes]
        if stray:
            raise UsageError(f"--evaluate: the file records {stray[0]} {updates[stray[0]]!r}, "
                             f"but {merged.graph} has no such parameter")
    return merged


def _cost_model(s: Settings, recorded: dict):
    """The cost model the settings (and a strategy file's record) ask for."""
    from cluster import Cluster
    from cost_model import CostModel

    rules = {}
    if s.sparse_embeddings:
        rules = {"embedding_lookup": True, "embedding_sync": "best"}
    elif "embedding_lookup" in recorded or "embedding_sync" in recorded:
        rules = {k: recorded[k] for k in ("embedding_lookup", "embedding_sync") if k in recorded}
    return CostModel(Cluster(s.flops, s.bw), distinct_rows=s.distinct_rows, **rules)


def _model_params(s: Settings) -> dict:
    return {k: getattr(s, k) for k in MODEL_PARAMS if getattr(s, k) is not None}


def run(s: Settings, out=None):
    """Do what the settings ask; return the :class:`result.Result`.  Every
    check comes before any file is written."""
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

    from cost_model import build_costs, check_procs, evaluate
    from dp_search import default_memory_limit
    from graph import build_graph
    from report import render_csv, render_dot, render_json, render_text
    from result import make_result

    check_procs(s.procs)
    model = _cost_model(s, recorded)
    g = build_graph(s.graph, **_model_params(s))
    limit = default_memory_limit() if s.mem_limit_gb is None else int(s.mem_limit_gb * 1e9)
    if layers is not None:
        from cost_model import check_strategy
        from graph import operators

        strategy = check_strategy(g, _strategy_from_layers(g, layers, s.evaluate))
        for v, (op, cfg) in enumerate(zip(operators(g), strategy)):
            if math.prod(cfg) > s.procs:
                raise UsageError(f"--evaluate: node {v} ({op.name}) config {tuple(cfg)} uses "
                                 f"{math.prod(cfg)} devices but p is {s.procs}")
        result = make_result(g, evaluate(g, strategy, model, s.procs), model, s.procs, "evaluate",
                             source=s.evaluate)
    else:
        result = _search(s, g, model, build_costs(g, s.procs, model, memory_limit=limit), limit, out)
    if s.compare:
        from baselines import compare

        result = result.with_baselines(compare(g, s.procs, model))
    if not math.isfinite(result.total_cost):
        raise ValueError("the total cost is not a finite number; choose realistic --flops and --bw")
    if s.output is not None:
        write_atomic(s.output, render_csv(result) if s.output.lower().endswith(".csv") else render_json(result))
    if s.dump_graph:
        write_atomic(DOT_FILE, render_dot(g))
        print(f"Wrote the graph ({g.number_of_nodes()} operators, {g.number_of_edges()} edges) to "
              f"{os.path.abspath(DOT_FILE)}", file=out)
    print(render_text(result), file=out)
    return result


def _search(s: Settings, g, model, costed, limit, out):
    from dp_search import search
    from result import make_result

    def once(progress=None):
        return search(costed, s.algo, memory_limit=limit, progress=progress)

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
    timings = ()
    if s.measure:
        for _ in range(2):
            once()
        timings = tuple(once().seconds for _ in range(5))
    return make_result(g, costed.figures(r.index), model, s.procs, "search", search=replace(r.stats, timings=timings))


def _message(e: Exception) -> str:
    """The one line a user sees: a setting's error under its flag."""
    if isinstance(e, SettingError):
        return f"{FLAGS.get(e.name, e.name)} {e.problem}"
    return str(e) or type(e).__name__


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
        print(f"{PROG}: error: {_message(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
