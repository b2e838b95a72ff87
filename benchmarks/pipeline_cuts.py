"""Pipelines of the graphs that are not one stack of layers: how the stages
share the work, and what the search costs.

For each built-in network and each ONNX model-zoo graph the onnx package
ships (weights stripped), on p = 8 devices (the paper's 10 TFLOPS and 16
GB/s), with ``--pp 2``, ``--pp 4`` and ``--pp auto``: the predicted step,
the stages found, their busiest and idlest stage per micro-batch (the
balance), the elements a device of each stage sends on per micro-batch
(summed over the stages), and the time
the planner took (in process, the graph built once per run, numba
loaded).  A refusal is printed as the row's step.

    python benchmarks/pipeline_cuts.py               # the table
    python benchmarks/pipeline_cuts.py --markdown    # for benchmarks/README.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from table import render  # noqa: E402

BUILT_IN = ("alexnet", "resnet101", "inception3", "rnnlm", "transformer")


def graphs() -> list[tuple[str, str]]:
    """(label, -g argument) of every graph measured."""
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return [(g, g) for g in BUILT_IN] + [(f.stem.removeprefix("light_"), str(f)) for f in sorted(light.glob("*.onnx"))]


def measure(label: str, arg: str, pp: str, p: int) -> list[str]:
    from cli.args import parse_args
    from errors import InputError
    from planner import plan
    from report import fmt_time

    t0 = time.perf_counter()
    try:
        r = plan(parse_args(["-g", arg, "-p", str(p), "--pp", pp])).result
    except (InputError, MemoryError) as e:
        return [label, pp, f"refused: {str(e)[:60]}", "", "", "", f"{time.perf_counter() - t0:.2f}"]
    seconds = time.perf_counter() - t0
    pipe = r.pipeline
    if pipe is None:
        return [label, pp, fmt_time(r.step_seconds), "no stages", "", "", f"{seconds:.2f}"]
    if pipe.pp == 1:  # one stage: accumulated micro-batches
        return [label, pp, fmt_time(r.step_seconds), f"none, {pipe.m} micro-batches", "", "", f"{seconds:.2f}"]
    cl = r.cost_model.cluster
    times = [s.time for s in pipe.stages]
    return [label, pp, fmt_time(r.step_seconds), f"{pipe.pp} x {pipe.stages[0].devices}, {pipe.schedule}",
            f"{fmt_time(cl.seconds(max(times)))} / {fmt_time(cl.seconds(min(times)))}",
            f"{sum(s.sends for s in pipe.stages):,.0f}", f"{seconds:.2f}"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--only", nargs="*", help="labels of the graphs to measure (default: all)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    from search.contract import fused_available

    fused_available()  # load numba once: the times leave it out
    head = ["graph", "--pp", "step", "stages", "busiest / idlest stage", "elements sent on per device", "planner s"]
    rows = []
    for label, arg in graphs():
        if args.only and label not in args.only:
            continue
        for pp in ("2", "4", "auto"):
            rows.append(measure(label, arg, pp, args.procs))
            print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"# {os.cpu_count()} cores; p = {args.procs}, batch 128, the paper's device", file=sys.stderr)
    print(render(head, rows, args.markdown))


if __name__ == "__main__":
    main()
