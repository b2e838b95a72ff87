"""What the planner's stages read, resolved once.

:func:`planner.plan` turns the settings into a :class:`Job` after it has
resolved the cluster, the framework and the cost model: the model source
and its parameters, the devices, the cost model, the search's memory
limit and threads, and what to measure.  The stages below it (the search
per operator, the pipeline search, the standard configurations) take the
job and read nothing else of the settings: a flag is interpreted once, at
the top.  The job also builds the model's graphs at other batches (a
pipeline's micro-batches), each once, and finds their repeated blocks,
each once; both are kept in the job, so one plan's stages share them and
nothing outlives the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Job"]


@dataclass(frozen=True)
class Job:
    """One plan's inputs, after every flag is resolved.

    ``source``: a built-in graph's name or a model file; ``params``: the
    model's parameters as ``(name, value)`` pairs (the batch among them
    when given); ``procs``: the devices; ``model``: the
    :class:`cost_model.CostModel` (cluster, framework, options);
    ``memory_limit``: bytes the search's tables may take; ``threads``,
    ``algo``: the search's; ``profile``, ``measure``: what to time."""

    source: str
    params: tuple
    procs: int
    model: object
    memory_limit: int
    threads: int | None = None
    algo: int = 0
    profile: bool = False
    measure: bool = False
    _graphs: dict = field(default_factory=dict, repr=False, compare=False)
    _chains: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, s, model, memory_limit: int, graphs: dict | None = None) -> Job:
        """The job the settings ``s`` ask for, on ``model``; ``graphs``
        (batch -> graph): graphs of this model built already."""
        from settings import MODEL_PARAMS

        params = tuple((k, getattr(s, k)) for k in MODEL_PARAMS if getattr(s, k) is not None)
        job = cls(s.graph, params, s.procs, model, memory_limit, s.threads, s.algo, bool(s.profile), bool(s.measure))
        job._graphs.update(graphs or {})
        return job

    def graph(self, batch: int | None = None):
        """The model's graph at ``batch`` samples (``None``: the
        parameters' batch, else the model's default), built once."""
        from models import build_graph

        params = dict(self.params)
        if batch is None:
            batch = params.get("batch")
        if batch is None:  # the model's default batch: kept under it too
            if None not in self._graphs:
                g = self._graphs[None] = build_graph(self.source, **params)
                self._graphs.setdefault(g.graph["batch"], g)
            return self._graphs[None]
        if batch not in self._graphs:
            self._graphs[batch] = build_graph(self.source, **{**params, "batch": batch})
        return self._graphs[batch]

    def seed(self, g, *chain) -> None:
        """Keep ``g``, the model's graph at its batch, as built (and its
        longest chain of repeated blocks, when given, as found)."""
        self._graphs.setdefault(g.graph["batch"], g)
        if chain:
            self._chains.setdefault(g.graph["batch"], chain[0])

    @property
    def batch(self) -> int:
        """The model's batch: the parameters', else the model's default."""
        return self.graph().graph["batch"]

    def chain(self, batch: int | None = None):
        """The longest chain of repeated blocks of :meth:`graph` at
        ``batch`` (``None``: none), found once."""
        g = self.graph(batch)
        key = g.graph["batch"]
        if key not in self._chains:
            from planner.graphs import _chain

            self._chains[key] = _chain(g)
        return self._chains[key]

    def graphs(self) -> dict:
        """The graphs built so far, batch -> graph."""
        return {b: g for b, g in self._graphs.items() if b is not None}

    def first_layers(self, batch: int, layers: int):
        """The model, a config, with its first ``layers`` layers only, at
        ``batch`` samples (:func:`models.sources.build_first_layers`)."""
        from models.sources import build_first_layers

        return build_first_layers(self.source, layers, **{**dict(self.params), "batch": batch})
