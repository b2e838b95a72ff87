"""Large models on many devices: whole ``scheduler.py`` processes, wall time
and peak memory, against the targets of searching repeated blocks once.

Settings (Llama 3 configs from their published sizes, written to a
temporary directory; H100 preset, nodes of 8, 400 Gb/s InfiniBand):

- Llama 3 70B at p = 1024, batch 1024 of 4096 tokens, the memory
  unbounded (target: 10 times faster than the 40.3 s and 4.0 GB of the
  block-by-block search, under 1 GB), and within the H100's memory with
  recomputation and ZeRO searched (target 10 s);
- Llama 3 405B at p = 16,384, batch 4096 of 4096 tokens, recomputation and
  ZeRO searched (target 60 s and 4 GB);
- the built-in Transformer at p = 1024 (target 2 s);
- the built-in Transformer at p = 1,000,000 with the default memory limit
  (no target: it was refused after 21.6 s and 4.9 GB before tables were
  kept merged; now it plans, or, under 10.9 GB, is refused at once).

Each is run ``--repeat`` times after one warm-up run (bytecode and the
compiled kernel cached); the best wall time and the largest peak RSS are
reported, with the step time and the search line of the last run.

    python benchmarks/large_models.py [--repeat 2] [--markdown] [--only 70b]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from table import render  # noqa: E402

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
         "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
         "tie_word_embeddings": False, "vocab_size": 128256}
SIZES = {"70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                     num_key_value_heads=8),
         "405b": dict(hidden_size=16384, intermediate_size=53248, num_hidden_layers=126, num_attention_heads=128,
                      num_key_value_heads=8)}
H100 = ("--device", "h100", "--gpus-per-node", "8", "--inter-bw", "50")
OPTIONS = ("--recompute", "auto", "--zero", "auto", "--pp", "1")  # the per-operator search, no stages
NONE = ("--recompute", "none", "--zero", "0", "--pp", "1")  # nothing a device searches by default


def cases(tmp: Path):
    paths = {}
    for name, sizes in SIZES.items():
        d = tmp / f"llama3-{name}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({**LLAMA, **sizes}))
        paths[name] = str(d)
    return [
        # memory unbounded (--device-memory 10000, no option searched): the search as it was measured before blocks
        # were searched once
        ("70b", "Llama 3 70B, p = 1024, memory unbounded",
         ["-g", paths["70b"], "-p", "1024", "-b", "1024", "--seq", "4096", *H100, "--device-memory", "10000", *NONE],
         4.03, 1.0),
        ("70b-options", "Llama 3 70B, p = 1024, options searched",
         ["-g", paths["70b"], "-p", "1024", "-b", "1024", "--seq", "4096", *H100, *OPTIONS], 10.0, None),
        ("405b", "Llama 3 405B, p = 16384, options searched",
         ["-g", paths["405b"], "-p", "16384", "-b", "4096", "--seq", "4096", *H100, *OPTIONS], 60.0, 4.0),
        ("transformer", "Transformer, p = 1024", ["-g", "transformer", "-p", "1024"], 2.0, None),
        ("transformer-1m", "Transformer, p = 1,000,000", ["-g", "transformer", "-p", "1000000"], None, None),
    ]


def once(args) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (GB) and stdout of one whole process (its
    peak from a wrapper that runs it alone: GNU time where there is one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmd = [sys.executable, str(ROOT / "scheduler.py"), *args, "-q"]
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as rss:
        timed = ["/usr/bin/time", "-f", "%M", "-o", rss.name] if os.path.exists("/usr/bin/time") else []
        t0 = time.perf_counter()
        proc = subprocess.run(timed + cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        text = rss.read().strip().splitlines()
    peak = float(text[-1]) / 1e6 if timed and text and text[-1].isdigit() else float("nan")  # KB -> GB
    if proc.returncode != 0:
        return wall, peak, "error: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    return wall, peak, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", nargs="*", help="case keys: 70b 70b-options 405b transformer transformer-1m")
    args = ap.parse_args()
    head = ["setting", "whole process s", "peak RSS GB", "target s", "target GB", "met", "step", "search"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key, title, argv, t_target, m_target in cases(Path(tmp)):
            if args.only and key not in args.only:
                continue
            once(argv)  # warm-up
            runs = [once(argv) for _ in range(args.repeat)]
            wall = min(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            out = runs[-1][2]
            step = next((x.split(":", 1)[1].strip().split(" on ")[0].split(" (")[0] for x in out.splitlines()
                         if x.startswith("Predicted step time")), out if out.startswith("error") else "-")
            search = next((x.strip() for x in out.splitlines() if x.strip().startswith("repeated blocks")), "-")
            met = (t_target is None or wall <= t_target) and (m_target is None or peak <= m_target)
            rows.append([title, f"{wall:.2f}", f"{peak:.2f}", "-" if t_target is None else f"{t_target:g}",
                         "-" if m_target is None else f"{m_target:g}", "yes" if met else "no", step, search])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(render(head, rows, args.markdown, left=1))


if __name__ == "__main__":
    main()
