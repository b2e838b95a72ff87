"""Megatron-LM's Table 1 (Narayanan et al., SC'21): every row, costed and
searched on the A100 80 GB preset, as the command line does.

For each row (a GPT-2-family config of its sizes, batch and GPUs):

- **paper's configuration**: ``--plan tp=T,pp=P,recompute=full,microbatch=1``
  (the rest data parallel, 1F1B, materialised attention as in 2021): the
  predicted step time, the TFLOP/s per GPU it implies by the paper's eq. (3)
  (recomputation included, as the table counts), the ratio to the published
  figure, and its peak memory; **no overlap**: the same with ``--overlap 0``
  (the gradients reduced after the backward pass, as Megatron-LM ran then);
- **searched**: ``--pp auto --microbatches auto --recompute auto`` on the
  same cluster and model (recomputation searched, as the paper recomputed):
  what it found (stages, micro-batches, schedule), its step time, its
  speed-up over the paper's configuration, its memory, and the wall time of
  the whole plan (graph, costs, search).

    python benchmarks/megatron.py [--markdown] [--rows 1.7,3.6] [--no-search]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the published table as the tests read it

from cli.args import parse_args  # noqa: E402
from planner import plan  # noqa: E402
from report import fmt_bytes  # noqa: E402
from megatron_table import ROWS, config, eq3  # noqa: E402
from table import render  # noqa: E402

def run(cfg: Path, row: dict, *more):
    argv = ["-g", str(cfg), "-p", str(row["gpus"]), "-b", str(row["batch"]), "--device", "a100-80gb",
            "--attention", "materialized", *map(str, more)]
    t0 = time.perf_counter()
    r = plan(parse_args(argv)).result
    return r, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--rows", help="comma-separated parameter counts (B) of the rows to run (default: all)")
    ap.add_argument("--no-search", action="store_true", help="cost the paper's configurations only")
    args = ap.parse_args()
    rows = list(ROWS)
    if args.rows:
        keep = {float(x) for x in args.rows.split(",")}
        rows = [r for r in rows if r["params_b"] in keep]
    head = ["model", "GPUs", "TP x PP", "published TFLOP/s", "predicted", "ratio", "no overlap", "memory",
            "searched plan", "step s", "speed-up", "memory ", "plan s"]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            cfg = config(Path(tmp), row)
            spec = f"tp={row['tp']},pp={row['pp']},recompute=full,microbatch=1"
            paper, _ = run(cfg, row, "--plan", spec)
            late, _ = run(cfg, row, "--plan", spec, "--overlap", 0)
            tf = eq3(row) / paper.step_seconds / row["gpus"] / 1e12
            tf_late = eq3(row) / late.step_seconds / row["gpus"] / 1e12
            cells = [f"{row['params_b']}B", str(row["gpus"]), f"{row['tp']} x {row['pp']}",
                     str(row["tflops_per_gpu"]), f"{tf:.1f}", f"{tf / row['tflops_per_gpu']:.2f}",
                     f"{tf_late:.1f} ({tf_late / row['tflops_per_gpu']:.2f})", fmt_bytes(paper.memory_bytes)]
            if args.no_search:
                cells += ["-"] * 5
            else:
                found, secs = run(cfg, row, "--pp", "auto", "--microbatches", "auto", "--recompute", "auto")
                pipe = found.pipeline
                what = (f"pp {pipe.pp}, {pipe.m} x {pipe.micro} samples, {pipe.schedule}" if pipe is not None
                        else "no pipeline")
                cells += [what, f"{found.step_seconds:.2f}", f"{paper.step_seconds / found.step_seconds:.2f}x",
                          fmt_bytes(found.memory_bytes), f"{secs:.1f}"]
            out.append(cells)
            print(" | ".join(cells), file=sys.stderr, flush=True)
    print(render(head, out, args.markdown, left=1))


if __name__ == "__main__":
    main()
