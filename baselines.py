"""Baseline strategies the search is compared with: data parallel, expert, Parallax.

Each baseline is a full strategy (one configuration per operator) costed with
our cost model, so that its total is directly comparable with the searched
strategy's.  A wanted split that does not divide a dimension falls back to
the largest divisor at most the wanted split; baselines may use
configurations outside the search space (e.g. data parallelism on 64 devices
with 2 samples each, below the cutoff of 4), and each layer says whether the
space holds it.

* **data parallel**: every operator splits only its batch dimension ``b`` by p.
* **expert**: the strategy a practitioner would write by hand; a model names
  its recipe (``g.graph["expert"]``):

  - ``one_weird_trick`` (Krizhevsky, 2014), for CNNs: data-parallel layers,
    except those whose kind names model dimensions (fully-connected layers,
    the classifier), which split them by p;
  - ``gnmt`` (Wu et al., 2016): layers stacked along a kind's stage
    dimension (the LSTM's layers) go to different devices, the batch is
    split by the rest; everything else data parallel;
  - ``mesh_tensorflow`` (Shazeer et al., 2018): batch split m ways and the
    model's model dimensions (``g.graph["model_dims"]``: vocabulary,
    feed-forward hidden, heads, experts) n ways, m * n = p, with the best
    (m, n); an operator with several splits the first one named.
* **Parallax** (Kim et al., EuroSys 2019): data parallel, but each
  embedding's weight gradient is exchanged sparsely through parameter
  servers (only the rows the device's tokens touch) instead of a dense
  all-reduce; dense variables keep the all-reduce.  Without embeddings it is
  data parallelism.
* **FSDP** (fully sharded data parallel, ZeRO stage 3; Rajbhandari et al.
  2020): data parallel, with each weight, its gradient and its optimizer
  state sharded over the devices; the weights are gathered for the forward
  and again for the backward pass, the gradients reduce-scattered.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from config_space import Decision, contiguous, divisors, divisors_upto
from cost_model import CostModel, evaluate, make_result
from graph import Operator, operators
from result import Result

__all__ = ["BASELINES", "fit", "data_parallel", "fsdp", "expert", "parallax", "compare"]

BASELINES = ("data_parallel", "fsdp", "expert", "parallax")


def fit(size: int, want: int) -> int:
    """The largest divisor of ``size`` that is at most ``want``."""
    return divisors_upto(size, max(want, 1))[-1]  # looked for up to ``want`` only


def _split(op: Operator, want: dict[str, int]) -> Decision:
    """A configuration splitting the dimensions named in ``want`` (by letter),
    within the operator's constraints: never-split dimensions stay whole,
    and a reshape, which admits only contiguous splits, uses as many devices
    from its leading dimensions instead."""
    cfg = tuple(1 if letter in op.never_split else fit(size, want.get(letter, 1))
                for letter, size in zip(op.dims, op.space))
    if op.contiguous_only and not contiguous(np.asarray([cfg]), op.space)[0]:
        cfg, left = [], math.prod(cfg)
        for size in op.space:
            c = fit(size, left)
            cfg.append(c)
            left //= c
            if c != size:  # split partly: every later dimension stays whole
                left = 1
    return Decision(op.dims, cfg)


def data_parallel(g, p: int) -> list[Decision]:
    """Every operator splits its batch dimension ``b`` by p."""
    return [_split(op, {"b": p}) for op in operators(g)]


def fsdp(g, p: int) -> list[Decision]:
    """Data parallelism with ZeRO stage 3 on every operator that holds a weight."""
    from blocks import find_chains
    from options import OPTIONS, contexts

    ctx = contexts(g, find_chains(g))
    zero = OPTIONS["zero"]
    return [d.with_options(zero=3) if zero.applies(op, ctx[v]) else d
            for v, (op, d) in enumerate(zip(operators(g), data_parallel(g, p)))]


def _one_weird_trick(g, p):
    out = []
    for op in operators(g):
        model = op.kind.model_dims(op)
        out.append(_split(op, {d: p for d in model} if model else {"b": p}))
    return out


def _gnmt(g, p):
    out = []
    for op in operators(g):
        stage = op.kind.stage_dim(op)
        if stage:
            layers = fit(op.size(stage), p)
            out.append(_split(op, {stage: layers, "b": p // layers}))
        else:
            out.append(_split(op, {"b": p}))
    return out


def mesh_tensorflow(g, m: int, n: int) -> list[Decision]:
    """Batch split ``m`` ways, the model's model dimensions ``n`` ways: in
    each operator the first of them (in the order ``model_dims`` names them)
    that it has, so that no operator uses more than ``m * n`` devices (an
    expert layer splits its experts, not also their hidden units)."""
    model_dims = g.graph.get("model_dims", "")
    out = []
    for op in operators(g):
        model = next((d for d in model_dims if d in op.dims), None)
        out.append(_split(op, {"b": m} if model is None else {"b": m, model: n}))
    return out


def expert(g, p: int, model: CostModel = CostModel()) -> tuple[list[Decision], str]:
    """The hand-written strategy for ``g`` and a short description of it."""
    recipe = g.graph.get("expert", "one_weird_trick")
    if recipe == "gnmt":
        return _gnmt(g, p), "GNMT: LSTM layers across devices, batch by the rest"
    if recipe == "mesh_tensorflow":
        best = None
        for n in divisors(p):
            m = p // n
            strategy = mesh_tensorflow(g, m, n)
            total = evaluate(g, strategy, model).total
            if best is None or total < best[0]:
                best = (total, strategy, m, n)
        _, strategy, m, n = best
        return strategy, f"Mesh-TensorFlow: batch {m} x model {n}"
    if recipe != "one_weird_trick":
        raise ValueError(f"unknown expert recipe {recipe!r}")
    return _one_weird_trick(g, p), "one weird trick: data-parallel convolutions, FC/softmax split by p"


def parallax(g, p: int, model: CostModel = CostModel()) -> tuple[list[Decision], CostModel]:
    """Data parallel strategy, and the cost model that exchanges embedding
    gradients sparsely (everything else as in ``model``)."""
    return data_parallel(g, p), replace(model, embedding_sync="sparse")


def compare(g, p: int, model: CostModel, keys=BASELINES) -> tuple[Result, ...]:
    """The baselines named by ``keys`` (all three by default) as results.
    ``model`` is the search's cost model; the baselines use its hardware and
    embedding compute but their own gradient exchange (a dense all-reduce,
    sparse for Parallax)."""
    base = replace(model, embedding_sync="dense")
    has_embedding = any(op.kind.sparse_rows for op in operators(g))
    wanted = []
    if "data_parallel" in keys:
        wanted.append(("data_parallel", "data parallel", "data parallel", data_parallel(g, p), base, ""))
    if "fsdp" in keys:
        wanted.append(("fsdp", "FSDP", "FSDP (data parallel, ZeRO-3)", fsdp(g, p), base, ""))
    if "expert" in keys:
        ex, ex_label = expert(g, p, base)
        wanted.append(("expert", "expert", f"expert ({ex_label})", ex, base, ""))
    if "parallax" in keys:
        px, px_model = parallax(g, p, base)
        wanted.append(("parallax", "Parallax", "Parallax (sparse embedding gradients)", px, px_model,
                       "" if has_embedding else f"Parallax equals data parallel here: {g.graph['name']} has no "
                       "embeddings"))
    out = []
    for key, name, label, strategy, m, note in wanted:
        sc = evaluate(g, strategy, m, p)
        out.append(make_result(g, sc, m, p, "baseline", key=key, title=name, label=label, note=note))
    return tuple(out)
