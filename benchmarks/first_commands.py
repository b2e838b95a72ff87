"""The first command a user types for a large model: whole ``scheduler.py``
processes, wall time, the answer and its predicted step.

Models from ``tests/data/configs/`` (Llama 3 70B and 405B from their
published sizes; Megatron-LM's GPT rows and Korthikanti et al.'s 22B and
175B as GPT-2-family configs, sequence 2048, vocabulary 51,200):

- **defaults**: the published settings planned with no option flag (on a
  device preset recomputation, ZeRO and pipeline stages are searched), each
  beside the published configuration costed by the same model (``--plan``):
  Llama 3 70B on 256 H100s (batch 256 of 4096 tokens; torchtitan's FSDP 32
  x TP 8 with full recomputation), Llama 3 405B on 8,192 H100s (batch 2048
  of 8192 tokens; the Llama 3 paper's TP 8 x PP 16 x DP 64, with full
  recomputation: with selective recomputation it needs 207 GB), Megatron-LM's
  39.1B and 145.6B rows on A100s (TP 8 x PP 2 and 8 x 8, full
  recomputation, micro-batches of one);
- **standard**: ``--search standard`` on Llama 3 8B at p = 64 (H100), the
  22B GPT on 8 A100s (batch 4), the 175B GPT on 64 A100s (batch 64),
  Llama 3 70B on 256 H100s, and Llama 3 8B asked to fit 5 GB (nothing
  can: a refusal);
- **pipeline**: ``--pp auto`` for Megatron-LM's 145.6B and 1T rows.

Each command runs ``--repeat`` times after one warm-up run (bytecode and
numba's compiled kernel cached; a warm-up over 20 s counts as one of the
runs); the best wall time and the least CPU time (user and system, every
thread) are reported, and the load average of the machine before and after
the runs: on a shared machine the CPU time is the steadier figure.  ``--root DIR`` runs another
checkout's ``scheduler.py`` on the same model files (to time a version
before a change); ``--timeout`` gives up on a command after that many
seconds (reported as ``> T``).

    python benchmarks/first_commands.py [--repeat 2] [--markdown] [--only 70b-std 1t-pp] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from table import render  # noqa: E402


def _m(name):
    return str(CONFIGS / name)


L70 = ["-g", _m("llama3-70b"), "-p", "256", "-b", "256", "--seq", "4096", "--device", "h100"]
L405 = ["-g", _m("llama3-405b"), "-p", "8192", "-b", "2048", "--seq", "8192", "--device", "h100"]
G39 = ["-g", _m("gpt-39.1b"), "-p", "512", "-b", "1536", "--device", "a100-80gb"]
G145 = ["-g", _m("gpt-145.6b"), "-p", "1536", "-b", "2304", "--device", "a100-80gb"]
G1T = ["-g", _m("gpt-1t"), "-p", "3072", "-b", "3072", "--device", "a100-80gb"]
L8 = ["-g", _m("llama3-8b"), "-p", "64", "--device", "h100"]
G22 = ["-g", _m("gpt-22b"), "-p", "8", "-b", "4", "--device", "a100-80gb"]
G175 = ["-g", _m("gpt-175b"), "-p", "64", "-b", "64", "--device", "a100-80gb"]
STD = ["--search", "standard"]

#: key, what, arguments, target seconds (None: none)
CASES = [
    ("70b", "Llama 3 70B, 256 H100, no option flag", L70, None),
    ("70b-paper", "  torchtitan's tp=8, recompute=full, zero=3", L70 + ["--plan", "tp=8,recompute=full,zero=3"], None),
    ("405b", "Llama 3 405B, 8192 H100, no option flag", L405, None),
    ("405b-paper", "  Llama 3's tp=8, pp=16 (dp=64), zero=1, recompute=full",
     L405 + ["--plan", "tp=8,pp=16,microbatch=1,zero=1,recompute=full"], None),
    ("39b", "Megatron 39.1B, 512 A100, no option flag", G39, None),
    ("39b-paper", "  Megatron's tp=8, pp=2, recompute=full", G39 + ["--plan", "tp=8,pp=2,recompute=full,microbatch=1"],
     None),
    ("145b", "Megatron 145.6B, 1536 A100, no option flag", G145, None),
    ("145b-paper", "  Megatron's tp=8, pp=8, recompute=full",
     G145 + ["--plan", "tp=8,pp=8,recompute=full,microbatch=1"], None),
    ("8b-std", "--search standard: Llama 3 8B, 64 H100", L8 + STD, None),
    ("22b-std", "--search standard: GPT 22B, 8 A100", G22 + STD, None),
    ("175b-std", "--search standard: GPT 175B, 64 A100", G175 + STD, 10.0),
    ("70b-std", "--search standard: Llama 3 70B, 256 H100", L70 + STD, 10.0),
    ("8b-std-5gb", "--search standard: Llama 3 8B, 5 GB (refused)", L8 + STD + ["--device-memory", "5"], 1.0),
    ("145b-pp", "--pp auto: Megatron 145.6B, 1536 A100", G145 + ["--pp", "auto"], 15.0),
    ("1t-pp", "--pp auto: Megatron 1T, 3072 A100", G1T + ["--pp", "auto"], 30.0),
]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def once(root: Path, args, timeout: float) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user and system, every thread) and the
    answer (the predicted step and the plan, or the error's line) of one
    whole process."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmd = [sys.executable, str(root / "scheduler.py"), *args, "-q"]
    t0, c0 = time.perf_counter(), _cpu()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=root)
    except subprocess.TimeoutExpired:
        return float("inf"), _cpu() - c0, f"> {timeout:g} s"
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if proc.returncode != 0:
        return wall, cpu, "refused: " + (proc.stderr.strip().splitlines() or ["?"])[-1].split("error: ", 1)[-1][:110]
    lines = proc.stdout.splitlines()
    step = next((x.split(":", 1)[1].strip().split(" (")[0] for x in lines if x.startswith("Predicted step time")), "-")
    what = next((x.split(":", 1)[1].strip()[:90] for x in lines if x.startswith("Best standard configuration")), "")
    if not what:
        what = next((x.strip()[:90] for x in lines if x.startswith(("Pipeline:", "PaSE"))), "")
    memory = next((x.split(":", 1)[1].split("(")[0].strip() + (", fits" if "fits the" in x else ", does not fit")
                   for x in lines if x.startswith("Memory per device")), "")
    return wall, cpu, f"{step}; {memory}; {what}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", nargs="*", help="case keys: " + " ".join(c[0] for c in CASES))
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose scheduler.py runs (default: this one)")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    root = Path(args.root).resolve()
    print(f"load average before the runs: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} cores)", file=sys.stderr)
    head = ["command", "whole process s", "CPU s", "target s", "met", "answer"]
    rows = []
    for key, title, argv, target in CASES:
        if args.only and key not in args.only:
            continue
        first = once(root, argv, args.timeout)  # warm-up; over 20 s it counts as a run (compiling is a small share)
        runs = [first] if first[0] > 20 else []
        if first[0] != float("inf"):
            runs += [once(root, argv, args.timeout) for _ in range(args.repeat - len(runs))]
        wall = min(r[0] for r in runs)
        cpu = min(r[1] for r in runs)
        met = "-" if target is None else ("yes" if wall <= target else "no")
        shown = f"> {args.timeout:g}" if wall == float("inf") else f"{wall:.2f}"
        rows.append([title, shown, f"{cpu:.2f}", "-" if target is None else f"{target:g}", met, runs[-1][2]])
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"load average after the runs: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    print(render(head, rows, args.markdown, left=1))


if __name__ == "__main__":
    main()
