"""The command line's flags: the parser, and the :class:`Settings` it turns
them into before any work (checked, with the models' defaults left to the
models).  Numbers are ASCII digits; a value that looks like an option
(``--flops -inf``) is read as the flag's value."""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field

from errors import InputError, SettingError, shown
from models import (
    MODELS,  # the registry only: kinds, numpy and networkx load when a model is built
)

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


class UsageError(InputError):
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
    breakdown: bool = False
    jobs: int | None = None  # a sweep's worker processes (default: every core)
    threads: int | None = None  # the search's threads (a sweep's worker: its share of the cores; None: all)
    plans: str | None = None  # a sweep: a directory for each setting's plan
    plot: str | None = None  # a sweep: a .png or .svg of --metric against the swept numeric axis
    metric: str = "speedup"
    sweep: tuple = ()  # ((setting, (values...)), ...): the flags given several values
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


def _device(text: str) -> str:
    """A device preset's name, in the presets' spelling."""
    from cluster.presets import known

    try:
        return known(text).name
    except SettingError as e:
        raise argparse.ArgumentTypeError(e.problem) from None


def _jobs(text: str) -> int:
    v = _int(text)
    if not 1 <= v <= 256:
        raise argparse.ArgumentTypeError(f"must be from 1 to 256, got {v}")
    return v


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer (ASCII digits, at most 30)")
    return int(text)


#: the settings a comma-separated list sweeps (see studies/sweep.py), and their flags
SWEEPABLE = {"graph": "-g", "procs": "-p", "batch": "-b", "width": "-m", "seq": "--seq", "flops": "--flops",
             "bw": "--bw", "inter_bw": "--inter-bw", "gpus_per_node": "--gpus-per-node", "latency": "--latency",
             "device": "--device", "precision": "--precision", "device_memory": "--device-memory",
             "optimizer": "--optimizer"}


def _listed(convert):
    """An argparse type: one value, or a comma-separated list of them (a
    sweep), as a tuple; empty items and repeated values are refused."""

    def parse(text: str) -> tuple:
        if convert is str and os.path.exists(text):  # a model file whose name has a comma
            return (text,)
        items = text.split(",")
        if len(items) > 1 and any(not item.strip() for item in items):
            raise argparse.ArgumentTypeError(f"{shown(text)} has an empty item")
        values = tuple(convert(item.strip() if len(items) > 1 else item) for item in items)
        for i, v in enumerate(values):
            if v in values[:i]:
                raise argparse.ArgumentTypeError(f"{shown(items[i])} appears twice in {shown(text)}")
        return values

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Find the minimum-cost hybrid data/parameter-parallel strategy for training "
        "a DNN on p devices (PaSE, Elango, IPDPS 2021). Costs are in FLOP.",
        epilog="example: python scheduler.py -g resnet101 -p 32 --output plan.json",
    )
    a = p.add_argument
    a("-p", "--procs", type=_listed(_int), help="number of devices (default: 32)")
    a("-g", "--graph", type=_listed(str), metavar="NAME",
      help=f"network to parallelize (default: alexnet): {', '.join(MODELS)}, an ONNX file, a Hugging Face "
      "config.json (gpt2, llama, mistral, qwen2, mixtral), or a directory holding one")
    a("-b", "--batch", type=_listed(_int), help="global mini-batch size (default: 128)")
    a("-m", "--model", type=_listed(_int), dest="width", metavar="WIDTH",
      help="model width of rnnlm (hidden units, default 2048) or transformer (embedding width, "
      "default 512; heads = width/64)")
    a("--seq", type=_listed(_int), help="sequence length of rnnlm and transformer (default: 256), of a config.json "
      "model (default: 2048, or its limit when smaller) and of an ONNX model's symbolic dimensions")
    a("--vocab", type=_int, help="vocabulary size of rnnlm (default 100000) and transformer (default 50000)")
    a("--layers", type=_int, help="layers of rnnlm (LSTM layers, default 2) and transformer "
      "(encoder and decoder layers each, default 6)")
    a("--flops", type=_listed(_positive_float), help="peak TFLOPS per device (default: 10.0, or the --device's)")
    a("--bw", type=_listed(_positive_float), help="peak interconnect bandwidth in GB/s, inside a node "
      "(default: 16.0, or the --device's)")
    a("--gpus-per-node", type=_listed(_int), metavar="G",
      help="devices per node, numbered node-major (default: one node holds them all)")
    a("--inter-bw", type=_listed(_positive_float), metavar="GB/s", help="bandwidth between nodes (default: --bw)")
    a("--latency", type=_listed(_nonnegative_float), metavar="US", help="microseconds per collective step (default: 0)")
    a("--device", type=_listed(_device), metavar="NAME", help="a device preset: peak TFLOPS at the precision, memory and bandwidth "
      "inside a node (v100, a100-40gb, a100-80gb, h100, paper); flags override it")
    a("--precision", type=_listed(str), metavar="P", help="training precision: fp64 (the original 8-byte word, default), fp32, "
      "bf16 or fp16 (mixed precision)")
    a("--device-memory", type=_listed(_positive_float), metavar="GB",
      help="memory of one device: the search returns the cheapest strategy that fits (default: the --device's, "
      "else unbounded)")
    a("--optimizer", type=_listed(str), metavar="NAME", help="sgd, momentum or adam: 0, 1 or 2 extra copies of the weights in the "
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
      help="memory the cost arrays and the search may use, in GB (default: half the memory available now; "
      "the process itself needs up to 100 MB more)")
    a("-q", "--summary", action="store_true",
      help="print only the header, the totals and the search line, not a row per operator")
    a("--compare", action="store_true",
      help="also cost data-parallel, expert and Parallax strategies and print predicted speedups")
    a("--sparse-embeddings", action="store_true",
      help="model embeddings as row lookups with sparse gradient exchange (default: the original one-hot GEMM)")
    a("--distinct-rows", type=_int, metavar="U",
      help="distinct vocabulary rows a device's tokens touch per step, for sparse embedding "
      "gradients (default: one per token)")
    a("--breakdown", action="store_true",
      help="where the cost goes: compute, communication and re-distribution by operator kind and by layer "
      "group (pandas); with --compare, the layers where the plan and data parallel differ most")
    g = p.add_argument_group("sweeps", "Give any of -g, -p, -b, -m, --seq, --flops, --bw, --inter-bw, "
                             "--gpus-per-node, --latency, --device, --precision, --device-memory, --optimizer a "
                             "comma-separated list to run every combination: one row per setting, in a table "
                             "(pandas). --output then writes the table (.csv, .json or .md).")
    g.add_argument("--jobs", type=_jobs, metavar="N", help="settings run at once, one process each "
                   "(default: every core)")
    g.add_argument("--plans", metavar="DIR", help="also write each setting's plan (JSON) into DIR")
    g.add_argument("--plot", metavar="FILE", help="plot --metric against the swept numeric setting: .png or "
                   ".svg (matplotlib), one line per value of the other swept settings")
    g.add_argument("--metric", choices=("speedup", "time", "cost"),
                   help="what --plot shows: speedup over data parallel, predicted step time, or cost "
                   "(default: speedup)")
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
    sweep = tuple((k, values[k]) for k in SWEEPABLE if k in values and len(values[k]) > 1)
    values.update({k: values[k][0] for k in SWEEPABLE if k in values})  # a sweep's first setting, until expanded
    return Settings(**values, sweep=sweep, explicit=frozenset(given))


