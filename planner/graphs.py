"""The model's graphs a plan needs: the settings' parameters, the graph at
a micro-batch, its longest chain of repeated blocks."""

from __future__ import annotations

from settings import MODEL_PARAMS, Settings

__all__ = ["pipe_graph"]


def _model_params(s: Settings) -> dict:
    return {k: getattr(s, k) for k in MODEL_PARAMS if getattr(s, k) is not None}


def _micro_graph(s: Settings, micro: int):
    """The model's graph at a micro-batch of ``micro`` samples."""
    from models import build_graph

    return build_graph(s.graph, **{**_model_params(s), "batch": micro})


def _model_batch(s: Settings) -> int:
    """The model's batch (the flag's, else the model's default)."""
    from models import build_graph

    return s.batch if s.batch is not None else build_graph(s.graph, **_model_params(s)).graph["batch"]


def _chain(g):
    """The graph's longest chain of repeated blocks (``None``: none)."""
    from blocks import find_chains

    chains = find_chains(g)
    return max(chains, key=lambda c: c.count * c.size) if chains else None


def pipe_graph(s: Settings, pipe):
    return _micro_graph(s, pipe.micro)
