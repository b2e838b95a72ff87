"""Megatron-LM's Table 1 (Narayanan et al., SC'21) as the tests and
``benchmarks/megatron.py`` read it: its rows, each row's model as a
GPT-2-family config, and the paper's FLOP per iteration."""

from __future__ import annotations

import json
from pathlib import Path

TABLE = json.loads((Path(__file__).parent / "data" / "published" / "megatron_table1.json").read_text())
ROWS = [dict(zip(TABLE["columns"], r)) for r in TABLE["rows"]]


def config(where: Path, row: dict) -> Path:
    """A row's model as a GPT-2-family config, in a directory named for it."""
    d = where / f"gpt-{row['params_b']}b"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_head": row["heads"], "n_embd": row["hidden"], "n_layer": row["layers"],
        "n_positions": TABLE["seq"], "vocab_size": TABLE["vocab"]}))
    return d / "config.json"


def eq3(row: dict) -> float:
    """Megatron-LM's FLOP per iteration (eq. 3, recomputation included)."""
    B, s, V, l, h = row["batch"], TABLE["seq"], TABLE["vocab"], row["layers"], row["hidden"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
