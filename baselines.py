"""Baseline strategies the search is compared with: data parallel, expert, Parallax.

Each baseline is a full strategy (one configuration per operator) costed with
our cost model, so that its total is directly comparable with the searched
strategy's.  A wanted split that does not divide a dimension falls back to
the largest divisor at most the wanted split; baselines may use
configurations outside the search space (e.g. data parallelism on 64 devices
with 2 samples each, below the cutoff of 4), and :func:`compare` says which.

* **data parallel**: every operator splits only its batch dimension ``b`` by p.
* **expert**: the strategy a practitioner would write by hand.  CNNs: "one
  weird trick" (Krizhevsky, 2014): data-parallel convolutions, pooling and
  normalisation; fully-connected layers and the softmax split their output
  (class) dimension by p.  RNNLM: GNMT style (Wu et al., 2016): the LSTM's
  layers on different devices, the batch split by the rest; everything else
  data parallel.  Transformer: Mesh-TensorFlow style (Shazeer et al., 2018):
  batch split m ways and the model dimensions (vocabulary ``v``, feed-forward
  hidden ``f``, heads ``h``) n ways, m * n = p, with the best (m, n).
* **Parallax** (Kim et al., EuroSys 2019): data parallel, but each
  embedding's weight gradient is exchanged sparsely through parameter
  servers (only the rows the device's tokens touch) instead of a dense
  all-reduce; dense variables keep the all-reduce.  Without embeddings it is
  data parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from config_space import divisors
from cost_model import CostModel, StrategyCost, evaluate
from graph import Operator, operators

__all__ = ["BASELINES", "Baseline", "fit", "data_parallel", "expert", "parallax", "compare"]

BASELINES = ("data_parallel", "expert", "parallax")
_MODEL_DIMS = "vfh"  # Mesh-TensorFlow's model-parallel dims: vocabulary, feed-forward, heads


def fit(size: int, want: int) -> int:
    """The largest divisor of ``size`` that is at most ``want``."""
    return max(d for d in divisors(size) if d <= max(want, 1))


def _split(op: Operator, want: dict[str, int]) -> tuple[int, ...]:
    """A configuration splitting the dimensions named in ``want`` (by letter)."""
    return tuple(fit(size, want.get(letter, 1)) for letter, size in zip(op.dims, op.space))


def data_parallel(g, p: int) -> list[tuple[int, ...]]:
    """Every operator splits its batch dimension ``b`` by p."""
    return [_split(op, {"b": p}) for op in operators(g)]


def _one_weird_trick(g, p):
    out = []
    for op in operators(g):
        if op.kind == "FC":
            out.append(_split(op, {"n": p}))
        elif op.kind == "SoftmaxCrossEntropy":
            out.append(_split(op, {op.dims[-1]: p}))
        else:
            out.append(_split(op, {"b": p}))
    return out


def _gnmt(g, p):
    out = []
    for op in operators(g):
        if op.kind == "LSTM":
            layers = fit(op.space[op.dims.index("l")], p)
            out.append(_split(op, {"l": layers, "b": p // layers}))
        else:
            out.append(_split(op, {"b": p}))
    return out


def _mesh_tensorflow(g, m, n):
    return [_split(op, {"b": m, **{d: n for d in _MODEL_DIMS}}) for op in operators(g)]


def expert(g, p: int, model: CostModel = CostModel()) -> tuple[list[tuple[int, ...]], str]:
    """The hand-written strategy for ``g`` and a short description of it."""
    name = g.graph["name"]
    if name == "rnnlm":
        return _gnmt(g, p), "GNMT: LSTM layers across devices, batch by the rest"
    if name == "transformer":
        best = None
        for n in divisors(p):
            m = p // n
            strategy = _mesh_tensorflow(g, m, n)
            total = evaluate(g, strategy, model).total
            if best is None or total < best[0]:
                best = (total, strategy, m, n)
        _, strategy, m, n = best
        return strategy, f"Mesh-TensorFlow: batch {m} x model {n}"
    return _one_weird_trick(g, p), "one weird trick: data-parallel convolutions, FC/softmax split by p"


def parallax(g, p: int, model: CostModel = CostModel()) -> tuple[list[tuple[int, ...]], CostModel]:
    """Data parallel strategy, and the cost model that exchanges embedding
    gradients sparsely (everything else as in ``model``)."""
    return data_parallel(g, p), replace(model, embedding_sync="sparse")


@dataclass(frozen=True)
class Baseline:
    """A baseline strategy and its cost."""

    key: str  # data_parallel, expert, parallax
    name: str  # short: "data parallel"
    label: str  # with its description
    strategy: list
    model: CostModel  # the rules it was costed with
    cost: StrategyCost
    in_space: bool  # every configuration is one the search enumerates
    note: str = ""


def compare(g, p: int, model: CostModel, costed=None) -> dict[str, Baseline]:
    """Cost the three baselines.  ``model`` is the search's cost model; the
    baselines use its hardware and embedding compute but their own gradient
    exchange (a dense all-reduce, sparse for Parallax).  ``costed`` (a
    :class:`cost_model.CostedGraph` for ``p``) tells which baseline stays
    inside the search space."""
    base = replace(model, embedding_sync="dense")
    has_embedding = any(op.kind == "Embedding" for op in operators(g))

    dp = data_parallel(g, p)
    ex, ex_label = expert(g, p, base)
    px, px_model = parallax(g, p, base)
    out = {}
    for key, name, label, strategy, m, note in [
        ("data_parallel", "data parallel", "data parallel", dp, base, ""),
        ("expert", "expert", f"expert ({ex_label})", ex, base, ""),
        ("parallax", "Parallax", "Parallax (sparse embedding gradients)", px, px_model,
         "" if has_embedding else f"Parallax equals data parallel here: {g.graph['name']} has no embeddings"),
    ]:
        inside = costed is not None and costed.outside(strategy) is None
        out[key] = Baseline(key, name, label, strategy, m, evaluate(g, strategy, m), inside, note)
    return out
