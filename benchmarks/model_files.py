"""Planning models read from files: import plus search, the whole process.

For each model it reports the operators, the parameters, the largest
configuration count K and dependent set M, the time to read the file and
build the graph, to build every cost array, and to search (in process, one
run each), and the wall time and peak RSS of the whole `scheduler.py`
process (best of --repeat runs), against the target for that model:

* every ONNX model-zoo graph the onnx package ships (weights stripped), p = 64:
  at most 3 s;
* PyTorch's exports of small GPT-2 and Llama (tests/data/onnx/), p = 64,
  --seq 128: 3 s;
* GPT-2 and Llama-3-8B from their config.json, p = 64, --seq 2048: 10 s;
* Mixtral-8x7B, p = 64, --seq 2048: 30 s.

    python benchmarks/model_files.py               # the table
    python benchmarks/model_files.py --markdown    # for benchmarks/README.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cost_model import build_costs  # noqa: E402
from dp_search import search  # noqa: E402
from graph import parameter_count  # noqa: E402
from models import build_graph  # noqa: E402
from search_time import process_run  # noqa: E402
from table import render  # noqa: E402

CONFIGS = ROOT / "tests" / "data" / "configs"


def cases(p: int) -> list[tuple[str, str, dict, float]]:
    """(label, -g argument, parameters, target seconds) of every model."""
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out = [(f.stem.removeprefix("light_"), str(f), {}, 3.0) for f in sorted(light.glob("*.onnx"))]
    out += [(f.stem, str(f), {"seq": 128}, 3.0) for f in sorted((ROOT / "tests" / "data" / "onnx").glob("hf-*.onnx"))]
    for name, target in (("gpt2", 10.0), ("llama3-8b", 10.0), ("mixtral-8x7b", 30.0)):
        out.append((name, str(CONFIGS / name / "config.json"), {"seq": 2048}, target))
    return out


def measure(label: str, arg: str, params: dict, target: float, p: int, repeat: int) -> list[str]:
    t0 = time.perf_counter()
    g = build_graph(arg, **params)
    t1 = time.perf_counter()
    costed = build_costs(g, p)
    t2 = time.perf_counter()
    r = search(costed)
    flags = [x for k, v in params.items() for x in (f"--{k}", str(v))]
    wall, rss = process_run(arg, p, *flags, repeat=repeat)
    return [label, str(p), str(g.number_of_nodes()), f"{parameter_count(g):,}", str(r.stats.largest_K),
            str(r.stats.largest_dependent_set), f"{t1 - t0:.2f}", f"{t2 - t1:.2f}", f"{r.seconds:.2f}", f"{wall:.2f}", f"{rss:.0f}",
            f"{target:g}", "yes" if wall <= target else "NO"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="whole-process runs per model (the best is kept)")
    ap.add_argument("--only", nargs="*", help="labels of the models to measure (default: all)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    head = ["model", "p", "operators", "parameters", "K", "M", "import s", "costs s", "search s", "process s",
            "peak RSS MB", "target s", "met"]
    rows = []
    for label, arg, params, target in cases(args.procs):
        if args.only and label not in args.only:
            continue
        rows.append(measure(label, arg, params, target, args.procs, args.repeat))
        print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"# {os.cpu_count()} cores; whole process best of {args.repeat}", file=sys.stderr)
    print(render(head, rows, args.markdown))


if __name__ == "__main__":
    main()
