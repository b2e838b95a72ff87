"""Every decoder family read from a config.json, planned on H100s: whole
``scheduler.py`` processes on the configs transformers' config classes
write (``tests/data/families``), the search's wall time and what it found.

Models under 20B parameters on 64 devices, under 150B on 256, DeepSeek-V3
on 2,048 (batch 2048 of 4096 tokens, as its paper's 2,048 H800s), all with
``--device h100`` (nodes of 8, InfiniBand NDR between them) and no other
flag: what a user gets by default, the per-operator search (one
configuration per operator, within the device's memory) with
recomputation, ZeRO and pipeline stages searched (``auto``, a real
device's default); or ``--search standard`` (tp, dp, cp, ep, sp, pp,
micro-batch, schedule, ZeRO and recomputation searched together).
``--root DIR`` runs another checkout's ``scheduler.py`` on the same
configs, to time a version before a change.

    python benchmarks/families.py [--search standard] [--jobs 4] [--only qwen3 deepseek_v3] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from table import render  # noqa: E402

DATA = ROOT / "tests" / "data" / "families"
COUNTS = json.loads((DATA / "counts.json").read_text())["parameters"]
DEVICE = ("--device", "h100")


def setting(family: str, standard: bool) -> tuple[int, tuple[str, ...]]:
    """Devices and the flags of a family's run besides the model, the device
    and the search: the workload only (DeepSeek-V3's batch and sequence)."""
    if family == "deepseek_v3":
        return 2048, ("-b", "2048", "--seq", "4096")
    return (64 if COUNTS[family] < 20e9 else 256), ()


#: the letters a per-operator plan is summed up by: samples, sequence, heads, hidden units, experts, vocabulary
LETTERS = "bsghfxv"


def splits(record: dict) -> str:
    """A per-operator plan in short: each letter's most frequent split over
    the operators that split it (``b8 h8 x8``), and ``stages`` when it has
    them."""
    seen: dict[str, dict[int, int]] = {}
    for layer in record["layers"]:
        for letter, c in zip(layer["dims"], layer["config"]):
            if letter in LETTERS:
                seen.setdefault(letter, {}).setdefault(c, 0)
                seen[letter][c] += 1
    parts = [f"{c}{max(ways, key=lambda w: (ways[w], w))}" for c in LETTERS if c in seen
             for ways in (seen[c],) if max(ways, key=lambda w: (ways[w], w)) > 1]
    stages = record.get("pipeline", {}).get("stages") if record.get("pipeline") else None
    return " ".join(parts) + (f", {len(stages)} stages" if stages and len(stages) > 1 else "")


def options(out: list[str]) -> str:
    """The execution options and the pipeline a plan's report states, in
    short (``zero=3 x48, 4 stages x 16 micro-batches``)."""
    used = next((x.split(":", 1)[1].split(";")[0].strip() for x in out if x.startswith("Execution options:")), "")
    parts = [u.replace(" on ", " x").replace(" operators", "").replace(" operator", "") for u in used.split(", ")
             if u]
    pipe = next((x for x in out if x.startswith("Pipeline: ")), "")
    if pipe and not pipe.startswith("Pipeline: 1 stage"):  # a pipeline of one stage: none
        words = pipe.split()
        parts.append(f"{words[1]} stages x {words[6]} micro-batches, {words[11].rstrip(';')}")
    return ", ".join(parts) or "none"


def once(family: str, extra: tuple[str, ...], root: Path = ROOT, timeout: float | None = None) -> dict:
    import tempfile

    p, flags = setting(family, "standard" in extra)
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "plan.json"
        args = ["-g", str(DATA / family), "-p", str(p), *DEVICE, *flags, *extra, "-q", "--output", str(out_json)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(root / "scheduler.py"), *args], capture_output=True,
                                  text=True, timeout=timeout, cwd=root,
                                  env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
        except subprocess.TimeoutExpired:
            return {"family": family, "p": p, "flags": " ".join(flags + extra), "wall": time.perf_counter() - t0,
                    "ok": False, "parameters": COUNTS[family], "plan": f"no answer within {timeout:.0f} s",
                    "options": "", "memory": "", "step": "", "mfu": ""}
        wall = time.perf_counter() - t0
        summary = splits(json.loads(out_json.read_text())) if proc.returncode == 0 else ""
    out = proc.stdout.splitlines()

    def line(start):
        return next((x.strip() for x in out if x.strip().startswith(start)), "")

    plan = line("Best standard configuration")
    plan = plan.split("): ", 1)[1].rstrip(".") if "): " in plan else (f"per operator: {summary}" if proc.returncode
                                                                        == 0 else (proc.stderr.strip() or "?")[-120:])
    params = next((x for x in out if " parameters" in x), str(COUNTS[family]))
    memory = line("Memory per device")
    step = line("Predicted step time")
    mfu = line("model FLOP/s per device")
    return {"family": family, "p": p, "flags": " ".join(flags + extra), "wall": wall, "ok": proc.returncode == 0,
            "parameters": params.split(", ")[0], "plan": plan, "options": options(out),
            "memory": memory.split(":", 1)[-1].split(" (")[0].strip(),
            "step": step.split(":", 1)[-1].split(" on ")[0].strip(), "mfu": mfu.split("(MFU ")[-1].split("%")[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1, help="runs at once")
    ap.add_argument("--only", nargs="*", help="families (model types)")
    ap.add_argument("--search", choices=("plan", "standard"), default="plan")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose scheduler.py runs")
    ap.add_argument("--timeout", type=float, help="seconds a run may take before it is reported as no answer")
    args = ap.parse_args()
    families = [f for f in COUNTS if not args.only or f in args.only]
    runs = [(f, ("--search", args.search) if args.search == "standard" else ()) for f in families]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda r: once(*r, root=args.root.resolve(), timeout=args.timeout), runs))
    head = ["model type", "parameters", "p", "flags", "search s", "plan found", "options", "step", "MFU %",
            "memory"]
    table = []
    for r in rows:
        table.append([r["family"], str(r["parameters"]).replace(" parameters", ""), str(r["p"]), r["flags"],
                      f"{r['wall']:.1f}", r["plan"], r["options"], r["step"], r["mfu"], r["memory"]])
    print(render(head, table, args.markdown, left=1))


if __name__ == "__main__":
    main()
