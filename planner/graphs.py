"""The model's graphs outside a plan's job (:mod:`planner.job` builds a
plan's own): the settings' model parameters, the graph of a pipelined
plan's micro-batch (what an export describes), a graph's longest chain of
repeated blocks."""

from __future__ import annotations

from settings import MODEL_PARAMS, Settings

__all__ = ["pipe_graph"]


def _model_params(s: Settings) -> dict:
    return {k: getattr(s, k) for k in MODEL_PARAMS if getattr(s, k) is not None}


def _chain(g):
    """The graph's longest chain of repeated blocks (``None``: none)."""
    from blocks import find_chains

    chains = find_chains(g)
    return max(chains, key=lambda c: c.count * c.size) if chains else None


def pipe_graph(s: Settings, pipe):
    """The model's graph at the micro-batch of the pipeline ``pipe``."""
    from models import build_graph

    return build_graph(s.graph, **{**_model_params(s), "batch": pipe.micro})
