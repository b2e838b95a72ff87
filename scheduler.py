"""PaSE: find an efficient parallelization strategy for training a DNN on p devices.

A reimplementation of "PaSE: Parallelization Strategies for Efficient DNN
Training" (Elango, IPDPS 2021): builds the computation graph, costs every
configuration of every operator, and finds the exact minimum-cost strategy.

    python scheduler.py -g resnet101 -p 32
    python scheduler.py -g model.onnx -p 32 -b 64
    python scheduler.py -g llama3-8b/config.json -p 64 --seq 4096
    python scheduler.py -g transformer -p 64 --output plan.json
    python scheduler.py --evaluate plan.json
    python scheduler.py -g alexnet -p 8 -d --measure
"""

from __future__ import annotations

try:  # an interrupt from the first line until the run starts ends quietly (see main)
    import os
    import signal
    import sys

    def _interrupted(signum=None, frame=None):
        if sys.stderr is not None:
            sys.stderr.write("scheduler.py: interrupted\n")
            sys.stderr.flush()
        os._exit(130)

    if __name__ == "__main__":
        signal.signal(signal.SIGINT, _interrupted)
    import argparse
    import json
    import math
    import re
    import time
    from dataclasses import dataclass, field, replace

    from errors import SettingError, shown
    from models import MODELS  # the registry only: kinds, numpy and networkx load when a model is built
except KeyboardInterrupt:  # before the handler was in place
    import os
    import sys

    if sys.stderr is not None:
        sys.stderr.write("scheduler.py: interrupted\n")
    os._exit(130)

DEFAULTS = {"graph": "alexnet", "procs": 32, "algo": 0}
DOT_FILE = "graph.dot"
PROG = "scheduler.py"
MODEL_PARAMS = ("batch", "width", "seq", "vocab", "layers")  # the models' parameters the flags set
# Settings named by the library, and the flags that set them.
FLAGS = {"p": "-p", "batch": "-b", "width": "-m", "seq": "--seq", "vocab": "--vocab", "layers": "--layers",
         "graph": "-g", "algo": "--algo", "flops": "--flops", "bw": "--bw", "flops and bw": "--flops and --bw",
         "inter_bw": "--inter-bw", "flops and inter_bw": "--flops and --inter-bw", "gpus_per_node": "--gpus-per-node",
         "latency": "--latency", "device": "--device", "precision": "--precision",
         "device_memory": "--device-memory", "optimizer": "--optimizer",
         "distinct_rows": "--distinct-rows", "embedding_sync": "--evaluate: embedding_sync",
         "embedding_lookup": "--evaluate: embedding_lookup"}


class UsageError(ValueError):
    """A bad command line or input file: reported in one line."""


class OutputFailed(OSError):
    """A result file could not be written (the report was printed)."""


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
    flops: float | None = None  # the cluster: None keeps the preset's, the file's or the default
    bw: float | None = None
    inter_bw: float | None = None
    gpus_per_node: int | None = None
    latency: float | None = None
    device: str | None = None
    precision: str | None = None
    cluster: str | None = None  # a cluster file
    device_memory: float | None = None  # GB
    optimizer: str | None = None
    algo: int = DEFAULTS["algo"]
    profile: bool = False
    measure: bool = False
    dump_graph: bool = False
    output: str | None = None
    evaluate: str | None = None
    mem_limit_gb: float | None = None
    compare: bool = False
    summary: bool = False
    sparse_embeddings: bool = False
    distinct_rows: int | None = None
    explicit: frozenset = field(default=frozenset(), compare=False)  # flags given on the command line


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


_INT = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only (int() would take '8_0' and Arabic-Indic digits)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE)
MAX_FLOAT = 1e12  # largest --flops, --bw, --mem-limit: far beyond any machine


def _float(text: str) -> float:
    if len(text) > 40 or not _FLOAT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
    return float(text)


def _positive_float(text: str) -> float:
    v = _float(text)
    if not (0 < v <= MAX_FLOAT):
        raise argparse.ArgumentTypeError(f"{shown(text)} must be a positive finite number (at most 1e12)")
    return v


def _nonnegative_float(text: str) -> float:
    v = _float(text)
    if not (0 <= v <= 1e6):
        raise argparse.ArgumentTypeError(f"{shown(text)} must be a number from 0 to 1e6")
    return v


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer (ASCII digits, at most 30)")
    return int(text)


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
      help=f"network to parallelize (default: alexnet): {', '.join(MODELS)}, an ONNX file, a Hugging Face "
      "config.json (gpt2, llama, mistral, qwen2, mixtral), or a directory holding one")
    a("-b", "--batch", type=_int, help="global mini-batch size (default: 128)")
    a("-m", "--model", type=_int, dest="width", metavar="WIDTH",
      help="model width of rnnlm (hidden units, default 2048) or transformer (embedding width, "
      "default 512; heads = width/64)")
    a("--seq", type=_int, help="sequence length of rnnlm and transformer (default: 256), of a config.json "
      "model (default: 2048, or its limit when smaller) and of an ONNX model's symbolic dimensions")
    a("--vocab", type=_int, help="vocabulary size of rnnlm (default 100000) and transformer (default 50000)")
    a("--layers", type=_int, help="layers of rnnlm (LSTM layers, default 2) and transformer "
      "(encoder and decoder layers each, default 6)")
    a("--flops", type=_positive_float, help="peak TFLOPS per device (default: 10.0, or the --device's)")
    a("--bw", type=_positive_float, help="peak interconnect bandwidth in GB/s, inside a node "
      "(default: 16.0, or the --device's)")
    a("--gpus-per-node", type=_int, metavar="G",
      help="devices per node, numbered node-major (default: one node holds them all)")
    a("--inter-bw", type=_positive_float, metavar="GB/s", help="bandwidth between nodes (default: --bw)")
    a("--latency", type=_nonnegative_float, metavar="US", help="microseconds per collective step (default: 0)")
    a("--device", metavar="NAME", help="a device preset: peak TFLOPS at the precision, memory and bandwidth "
      "inside a node (v100, a100-40gb, a100-80gb, h100, paper); flags override it")
    a("--precision", metavar="P", help="training precision: fp64 (the original 8-byte word, default), fp32, "
      "bf16 or fp16 (mixed precision)")
    a("--device-memory", type=_positive_float, metavar="GB",
      help="memory of one device: the search returns the cheapest strategy that fits (default: the --device's, "
      "else unbounded)")
    a("--optimizer", metavar="NAME", help="sgd, momentum or adam: 0, 1 or 2 extra copies of the weights in the "
      "memory model (default: adam)")
    a("--cluster", metavar="FILE", help="a cluster file (JSON or TOML) with any of device, flops, bw, inter_bw, "
      "gpus_per_node, latency, device_memory, precision; flags override it")
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
    a("-q", "--summary", action="store_true",
      help="print only the header, the totals and the search line, not a row per operator")
    a("--compare", action="store_true",
      help="also cost data-parallel, expert and Parallax strategies and print predicted speedups")
    a("--sparse-embeddings", action="store_true",
      help="model embeddings as row lookups with sparse gradient exchange (default: the original one-hot GEMM)")
    a("--distinct-rows", type=_int, metavar="U",
      help="distinct vocabulary rows a device's tokens touch per step, for sparse embedding "
      "gradients (default: one per token)")
    return p


def _values_first(parser, argv: list[str]) -> list[str]:
    """``--flops -inf`` as ``--flops=-inf``: argparse would read ``-inf`` as
    an option and say the flag lacks its value."""
    takes = {opt for a in parser._actions if a.nargs is None and a.option_strings for opt in a.option_strings}
    known = {opt for a in parser._actions for opt in a.option_strings}
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg in takes and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] not in known \
                and not argv[i + 1].startswith("--"):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def parse_args(argv=None) -> Settings:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = parser.parse_args(_values_first(parser, argv))
    given = {k for k, v in vars(ns).items() if v is not None and v is not False}
    values = {k: v for k, v in vars(ns).items() if v is not None}
    return Settings(**values, explicit=frozenset(given))


# -- input files ---------------------------------------------------------------


MAX_STRATEGY_BYTES = 64 << 20  # a strategy file for any built-in graph at p = 10^6 is far smaller


def _read_json(path: str, flag: str, limit: int = MAX_STRATEGY_BYTES):
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise UsageError(f"{flag}: {path} is larger than {limit >> 20} MB: not a file this tool wrote")
        return json.loads(raw.decode("utf-8"))
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
    except UsageError:
        raise
    except ValueError as e:  # e.g. an integer with thousands of digits
        why = "a number has too many digits" if "digits" in str(e) else type(e).__name__
        raise UsageError(f"{flag}: {path} is not a usable JSON file ({why})") from None


# What a strategy file may record, and the types it must have.
_RECORDED = {"graph": (str,), "procs": (int,), "flops": (int, float), "bw": (int, float), "distinct_rows": (int,),
             "embedding_lookup": (bool,), "embedding_sync": (str,), "batch": (int,), "width": (int,),
             "optimizer": (str,), "cluster": (dict,), "params": (dict,)}
_KIND_NAMES = {(str,): "a string", (int,): "an integer", (int, float): "a number", (bool,): "true or false",
               (dict,): "an object"}


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
            raise UsageError(f"--evaluate: {path}: layers[{i}] has id {shown(lid)}, not an integer")
        if not isinstance(cfg, list):
            raise UsageError(f"--evaluate: {path}: layer {lid} has config {shown(cfg)}, not a list of integers")
        layers.append((lid, cfg))
    recorded = {}
    for key, kinds in _RECORDED.items():
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
            raise UsageError(f"--evaluate: {path}: {key} is {shown(value)}, not {_KIND_NAMES[kinds]}")
        recorded[key] = value
    params = recorded.pop("params", {})  # the model's parameters (files written before it: batch, width only)
    for key, value in params.items():
        if key in MODEL_PARAMS and value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"--evaluate: {path}: params.{key} is {shown(value)}, not an integer")
            recorded[key] = value
    model = data.get("model")  # a model read from a file: which one
    if model is not None:
        if not isinstance(model, dict) or not all(isinstance(model.get(k), str) for k in ("source", "sha256")):
            raise UsageError(f"--evaluate: {path}: \"model\" must name the model's file (source) and its sha256")
        recorded["model"] = model
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
        if os.path.islink(path):
            raise UsageError(f"{flag}: {path} is a link to {target}, whose directory {parent} does not exist")
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
    """Progress on stderr, only when it is a terminal and the work is slow."""

    def __init__(self, what: str = "searching", unit: str = "operators"):
        self.what, self.unit = what, unit
        self.on = sys.stderr is not None and sys.stderr.isatty()
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
            sys.stderr.write(f"\r{self.what}: {done}/{total} {self.unit}, {now - self.t0:.1f} s ")
            sys.stderr.flush()

    def close(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


def _with_file_settings(s: Settings, recorded: dict) -> Settings:
    """Flags not given on the command line come from the strategy file."""
    names = ("graph", "procs", "distinct_rows") + MODEL_PARAMS
    updates = {k: recorded[k] for k in names if k in recorded and k not in s.explicit}
    if "graph" in updates and "model" in recorded:
        updates["graph"] = _find_model(recorded["model"], s.evaluate)
    elif "graph" in updates and updates["graph"] not in MODELS:
        raise UsageError(f"--evaluate: the file names an unknown graph {updates['graph']!r}")
    merged = replace(s, **updates)
    if merged.graph in MODELS:
        takes = {p.name for p in MODELS[merged.graph].params}
        stray = [k for k in MODEL_PARAMS if k in updates and k not in takes]
        if stray:
            raise UsageError(f"--evaluate: the file records {stray[0]} {updates[stray[0]]!r}, "
                             f"but {merged.graph} has no such parameter")
    return merged


CLUSTER_SETTINGS = ("flops", "bw", "inter_bw", "gpus_per_node", "latency", "precision", "device_memory")


def _cluster(s: Settings, recorded: dict):
    """The cluster the settings, a cluster file, a device preset and a
    strategy file's record describe (see ``cluster/config.py``)."""
    from cluster.config import check_fields, read_cluster_file, resolve

    file_fields = None
    if s.cluster is not None:
        try:
            file_fields = read_cluster_file(s.cluster)
        except ValueError as e:
            raise UsageError(f"--cluster: {e}") from None
    old = recorded.get("cluster")
    if not isinstance(old, dict):  # files written before the cluster was recorded
        old = {k: recorded[k] for k in ("flops", "bw") if k in recorded}
    try:
        old = check_fields(old, "the strategy file's \"cluster\"")
    except ValueError as e:
        raise UsageError(f"--evaluate: {e}") from None
    return resolve({k: getattr(s, k) for k in CLUSTER_SETTINGS}, device=s.device, file_fields=file_fields,
                   recorded=old)


def _find_model(model: dict, path: str) -> str:
    """The model file a strategy file names: where it was, or beside the
    strategy file."""
    for where in (model.get("path"), os.path.join(os.path.dirname(path), model["source"])):
        if isinstance(where, str) and where and os.path.exists(where):
            return where
    raise UsageError(f"--evaluate: {path} is a strategy for {model['source']}, which is not at "
                     f"{model.get('path') or model['source']}; give the model with -g")


def _check_model(g, recorded: dict, path: str) -> None:
    """Refuse a strategy file written for another model than ``g``."""
    source = g.graph.get("source")
    mine = f"{source['file']} (sha256 {source['sha256'][:12]})" if source else g.graph["name"]
    model = recorded.get("model")
    if model is not None:
        if source is None or source["sha256"] != model["sha256"]:
            raise UsageError(f"--evaluate: {path} is a strategy for {model['source']} "
                             f"(sha256 {model['sha256'][:12]}), not for {mine}")
    elif "graph" in recorded and (source is not None or recorded["graph"] != g.graph["name"]):
        raise UsageError(f"--evaluate: {path} is a strategy for {recorded['graph']}, not for {mine}")


def _cost_model(s: Settings, recorded: dict):
    """The cost model the settings (and a strategy file's record) ask for."""
    from cost_model import CostModel

    rules = {}
    if s.sparse_embeddings:
        rules = {"embedding_lookup": True, "embedding_sync": "best"}
    elif "embedding_lookup" in recorded or "embedding_sync" in recorded:
        rules = {k: recorded[k] for k in ("embedding_lookup", "embedding_sync") if k in recorded}
    optimizer = s.optimizer if s.optimizer is not None else recorded.get("optimizer", "adam")
    return CostModel(_cluster(s, recorded), distinct_rows=s.distinct_rows, optimizer=optimizer, **rules)


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
    from graph import build_graph, operators
    from report import render_csv, render_dot, render_json, render_text
    from result import make_result

    check_procs(s.procs)
    model = _cost_model(s, recorded)
    g = build_graph(s.graph, **_model_params(s))
    limit = default_memory_limit() if s.mem_limit_gb is None else int(s.mem_limit_gb * 1e9)
    if layers is not None:
        from cost_model import check_strategy

        _check_model(g, recorded, s.evaluate)
        strategy = check_strategy(g, _strategy_from_layers(g, layers, s.evaluate))
        for v, (op, cfg) in enumerate(zip(operators(g), strategy)):
            if math.prod(cfg) > s.procs:
                raise UsageError(f"--evaluate: node {v} ({op.name}) config {tuple(cfg)} uses "
                                 f"{math.prod(cfg)} devices but p is {s.procs}")
        rules_from = s.evaluate if not s.sparse_embeddings and any(
            k in recorded for k in ("embedding_lookup", "embedding_sync")) else None
        result = make_result(g, evaluate(g, strategy, model, s.procs), model, s.procs, "evaluate",
                             source=s.evaluate, rules_from=rules_from)
        most = max(math.prod(cfg) for cfg in strategy)
        if most < s.procs:
            result = replace(result, notes=result.notes + (
                f"This strategy uses at most {most} of the {s.procs} devices.",))
    else:
        progress = _Progress("building the cost tables", "edges")
        try:
            costed = build_costs(g, s.procs, model, memory_limit=limit, progress=progress)
        finally:
            progress.close()
        result = _search(s, g, model, costed, limit, out)
        most = max(int(c.prod(axis=1).max()) for c in costed.configs)
        if most < s.procs:
            used = max(layer.devices for layer in result.layers)
            result = replace(result, notes=result.notes + (
                f"No operator can use more than {most} of the {s.procs} devices (no configuration splits further "
                f"at cutoff {g.graph['cutoff']}); this strategy uses at most {used}.",))
    if s.distinct_rows is not None:
        why = None
        if not any(op.kind.sparse_rows for op in operators(g)):
            why = f"{g.graph['name']} has no embedding"
        elif model.embedding_sync == "dense" and not s.compare:
            why = "embedding gradients are all-reduced densely (use --sparse-embeddings or --compare)"
        if why:
            result = replace(result, notes=result.notes + (f"--distinct-rows has no effect here: {why}.",))
    if s.compare:
        from baselines import compare

        result = result.with_baselines(compare(g, s.procs, model))
    if not math.isfinite(result.total_cost):
        raise ValueError("the total cost is not a finite number; choose realistic --flops and --bw")
    # The files first, then the report, which is printed even when a file
    # could not be written (a full disk): the error follows it.
    files = []
    if s.output is not None:
        files.append(("--output", s.output, render_csv if s.output.lower().endswith(".csv") else render_json, result))
    if s.dump_graph:
        files.append(("--dump-graph", DOT_FILE, render_dot, g))
    failed = None
    for flag, path, render, what in files:
        try:
            write_atomic(path, render(what))
        except OSError as e:
            failed = failed or OutputFailed(f"{flag}: could not write {path}: {e.strerror or e}")
            continue
        if flag == "--dump-graph":
            print(f"Wrote the graph ({g.number_of_nodes()} operators, {g.number_of_edges()} edges) to "
                  f"{os.path.abspath(DOT_FILE)}", file=out)
    print(render_text(result, summary=s.summary), file=out)
    if failed is not None:
        raise failed
    return result


def _search(s: Settings, g, model, costed, limit, out):
    from dp_search import ALGOS, search, search_within
    from result import MemoryBound, SearchStats, make_result

    capacity = model.cluster.memory

    def once(progress=None):
        if capacity is None:
            return search(costed, s.algo, memory_limit=limit, progress=progress)
        return search_within(costed, capacity * 1e9, s.algo, memory_limit=limit, progress=progress)

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
        timings = tuple(_found(once()).seconds for _ in range(5))
    bound = None
    if capacity is not None:
        bound = MemoryBound(capacity * 1e9, r.status, r.lower_bound, r.gap, r.lam, r.searches, r.least_memory)
    found = _found(r)
    st = found.stats
    stats = SearchStats(s.algo, ALGOS[s.algo], found.seconds, st["K"], st["M"], st["largest_table"], st["work"],
                        timings)
    return make_result(g, costed.figures(found.index), model, s.procs, "search", search=stats, bound=bound)


def _found(r):
    """The search result of a search, or of one held within the memory."""
    return getattr(r, "result", r)


def _message(e: Exception) -> str:
    """The one line a user sees: a setting's error under its flag."""
    if isinstance(e, SettingError):
        return f"{FLAGS.get(e.name, e.name)} {e.problem}"
    return str(e) or type(e).__name__


def _say(line: str) -> None:
    """One line on stderr, if there is a stderr."""
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def main(argv=None) -> int:
    """Exit statuses: 0 done; 2 a bad command line or input (a flag's value, a
    file the tool cannot use); 1 the run could not be done (it would not fit
    the memory limit, nothing fits the device, a file could not be written);
    130 interrupted; 141 the reader of the report went away."""
    if sys.stdout is None:  # started with stdout closed: the report goes nowhere
        sys.stdout = open(os.devnull, "w")
    try:
        s = parse_args(argv)
        if signal.getsignal(signal.SIGINT) is _interrupted:  # from here an interrupt unwinds (files stay whole)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        run(s)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ValueError as e:  # a setting or input the tool cannot use
        _say(f"{PROG}: error: {_message(e)}")
        return 2
    except (MemoryError, OSError) as e:  # the run could not be done
        _say(f"{PROG}: error: {_message(e)}")
        return 1
    except KeyboardInterrupt:
        _say(f"{PROG}: interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
