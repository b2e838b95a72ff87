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


def eq3_flop(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Megatron-LM's FLOP per iteration of a GPT model (eq. 3, recomputation
    included), as Megatron-LM and Megatron-DeepSpeed log their TFLOP/s."""
    s, h = seq, hidden
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))


def eq3(row: dict) -> float:
    """Eq. (3) for a row of Narayanan et al.'s Table 1."""
    return eq3_flop(row["batch"], TABLE["seq"], row["layers"], row["hidden"], TABLE["vocab"])
