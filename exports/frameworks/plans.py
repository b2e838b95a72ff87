"""A planned run as the framework exports read it, and the standard
configuration a plan is, when it is one.

:class:`PlanView` wraps what :func:`planner.plan` returns: the settings,
the graph whose operators the result's layers are (a pipeline's
micro-batch graph), the decisions, a pipeline's stages, the model's batch
and sequence, and :meth:`PlanView.standard`: the standard configuration
(:mod:`standard`) of the plan, from ``--plan``, or recognised in a
searched or evaluated plan by :func:`recognise`.
"""

from __future__ import annotations

from functools import cached_property

from errors import InputError

__all__ = ["PlanView", "recognise", "NotStandard"]


class NotStandard(InputError):
    """A plan that is no standard configuration."""


def _tensor_letter(op, roles: dict):
    """The letter tensor parallelism splits in ``op`` (as
    :func:`standard.strategy` chooses it), or ``None``."""
    from standard import _tensor_letter as first_of

    if roles:
        return first_of(op, roles.get("tensor", ""))
    return next((c for c in op.kind.model_dims(op) if c not in op.never_split), None)


def _splits(name: str, what: str, ways: int) -> str:
    return f"{name} splits {what} {ways} ways" if ways > 1 else f"{name} does not split {what}"


def recognise(g, decisions, p: int, batch: int, nodes=None):
    """The complete :class:`standard.Standard` whose decisions on ``g``
    (``p`` devices, a batch of ``batch``) are exactly ``decisions``, or
    :class:`NotStandard` naming the first operator that differs;
    ``nodes``: the operators to read and check (a range; default all, and
    then ``decisions`` holds one per operator of ``g``, else one per node
    of ``nodes``).

    The degrees are read from the operators that show them (``dp`` from
    the sample split of an operator without experts, ``tp`` from the first
    operator with a tensor letter, ``cp`` from its sequence split, ``ep``
    and ``etp`` (its tensor letter's split) from an expert operator, ``sp`` from an operator without a tensor
    letter whose sequence is split ``cp x tp`` ways, the options from the
    first operator that sets them); then :func:`standard.strategy` of
    those degrees must give every decision."""
    from graph import operators
    from standard import Standard, complete, strategy

    roles = dict(g.graph.get("roles", {}))
    seq, expert = roles.get("seq", ""), roles.get("expert", "")
    every = operators(g)
    nodes = range(len(every)) if nodes is None else nodes
    ops = [every[v] for v in nodes]
    dp = tp = cp = ep = etp = None
    shown, experts_shown = {}, {}  # where each degree was read (the experts' apart: they make no devices)
    for op, d in zip(ops, decisions):
        if expert and expert in op.dims:
            if ep is None:
                ep, experts_shown["ep"] = d[expert], _splits(op.name, "its experts", d[expert])
            t = _tensor_letter(op, roles)
            if t is not None and etp is None:
                etp, experts_shown["etp"] = d[t], _splits(op.name, t, d[t])
            continue
        if dp is None:
            dp, shown["dp"] = d["b"], _splits(op.name, "its samples", d["b"])
        t = _tensor_letter(op, roles)
        if t is not None and tp is None:
            tp, shown["tp"] = d[t], _splits(op.name, t, d[t])
            if seq and seq in op.dims and seq not in op.never_split:
                cp = d[seq]
    tp, cp, ep, dp = tp or 1, cp or 1, ep or 1, dp or 1
    sp = 0
    if roles and tp > 1:
        sp = int(any(_tensor_letter(op, roles) is None and seq and seq in op.dims and seq not in op.never_split
                     and not (expert and expert in op.dims) and d[seq] == cp * tp for op, d in zip(ops, decisions)))
    options = {}
    for name in ("recompute", "zero"):
        options[name] = next((d.option(name) for d in decisions if dict(d.options).get(name) is not None), None)
    std = Standard(tp=tp, dp=dp, cp=cp, ep=ep, etp=None if etp in (None, tp) else etp, sp=sp,
                   **{k: v for k, v in options.items() if v is not None})
    used = max((d.devices for d in decisions), default=1)
    if used < p:
        raise NotStandard(f"the plan is no standard configuration: it runs on at most {used} of the {p} devices")
    if std.devices != p:
        raise NotStandard(f"the plan is no standard configuration: {' and '.join(shown.values())}, which make "
                          f"{std.devices} devices, not {p}")
    try:
        std = complete(std, p, batch)
        expected = strategy(g, std)
    except InputError as e:
        why, read = str(e).removeprefix("--plan: "), " and ".join({**shown, **experts_shown}.values())
        raise NotStandard(f"the plan is no standard configuration: {read}, as {std.describe()} would, but then "
                          f"{why}") from None
    for op, got, want in zip(ops, decisions, [expected[v] for v in nodes]):
        if got != want:
            raise NotStandard(f"the plan is no standard configuration: {op.name} is {got!r} where "
                              f"{std.describe() or 'data parallelism'} splits it {want!r}")
    return std


class PlanView:
    """What the exports read of a planned run (see the module docstring)."""

    def __init__(self, settings, graph, result):
        self.settings = settings
        self.result = result
        self._graph = graph

    @property
    def procs(self) -> int:
        return self.result.procs

    @property
    def model_name(self) -> str:
        return self.result.graph

    @property
    def batch(self) -> int:
        return int(self.result.param("batch"))

    @property
    def seq(self) -> int | None:
        s = self.result.param("seq")
        return None if s is None else int(s)

    @property
    def precision(self) -> str:
        return self.result.cost_model.cluster.precision

    @property
    def framework(self):
        """The framework profile the plan was costed under (``None``: none):
        whether it ran compiled and in Float8, which an export says too."""
        return self.result.cost_model.framework

    @property
    def pipeline(self):
        return self.result.pipeline

    @cached_property
    def graph(self):
        """The graph the result's layers are: for a pipeline, the graph of
        one micro-batch."""
        if self.pipeline is None:
            return self._graph
        from planner import pipe_graph

        return pipe_graph(self.settings, self.pipeline)

    @property
    def source(self) -> dict:
        """How to build the graph again: the model (a built-in name, or the
        file's absolute path) and the parameters of the graph the layers
        are (a pipeline's: one micro-batch)."""
        import os

        name = self.settings.graph
        return {"graph": os.path.abspath(name) if os.path.exists(name) else name,
                "params": dict(self.graph.graph.get("params", {}))}

    @property
    def decisions(self) -> list:
        return [layer.decision for layer in self.result.layers]

    @property
    def stage_ranges(self):
        """A pipeline's node ranges ``[(lo, hi), ...]``, else ``None``."""
        if self.pipeline is None:
            return None
        return [(s.nodes[0], s.nodes[-1] + 1) for s in self.pipeline.stages]

    @cached_property
    def chain(self):
        """The graph's longest chain of repeated blocks (the layers), or ``None``."""
        from planner import _chain

        return _chain(self.graph)

    def stage_blocks(self) -> list[int]:
        """Blocks (layers) of each pipeline stage."""
        chain = self.chain
        return [sum(1 for k in range(chain.count) if lo <= chain.block(k)[0] < hi) for lo, hi in self.stage_ranges]

    def describe(self) -> str:
        """Where the plan came from, in a few words."""
        r = self.result
        if self.settings.plan is not None:
            return r.label or f"standard configuration {self.settings.plan}"
        if r.source is not None:
            return f"the plan of {r.source}, evaluated"
        return "the plan found by the search"

    def standard(self, fmt: str):
        """The complete standard configuration of the plan, for the format
        ``fmt`` (named in the message when the plan is none)."""
        try:
            return self._standard
        except NotStandard as e:
            raise NotStandard(f"--export {fmt}: {e}; {fmt} expresses standard configurations only "
                              "(give one with --plan, or export the plan with --export jax)") from None

    @cached_property
    def _standard(self):
        from standard import complete, parse

        if self.settings.plan is not None:
            return complete(parse(self.settings.plan), self.procs, self.batch)
        if self.pipeline is not None:
            return self._pipelined_standard()
        return recognise(self.graph, self.decisions, self.procs, self.batch)

    def _pipelined_standard(self):
        """The standard configuration of a searched or evaluated pipeline:
        every stage's operators split as one configuration splits them on
        the stage's devices (the stages may hold different numbers of
        layers)."""
        from dataclasses import replace

        pipe = self.pipeline
        q = self.procs // pipe.pp
        found = []
        for k, (lo, hi) in enumerate(self.stage_ranges):
            try:
                found.append(recognise(self.graph, self.decisions[lo:hi], q, pipe.micro, range(lo, hi)))
            except NotStandard as e:
                raise NotStandard(f"stage {k}: {e}") from None
        if any(std != found[0] for std in found[1:]):
            k = next(i for i, std in enumerate(found) if std != found[0])
            raise NotStandard(f"the plan is no standard configuration: stage 0 is {found[0].describe()}, stage {k} "
                              f"{found[k].describe()}")
        std = found[0]
        return replace(std, pp=pipe.pp, microbatch=pipe.micro // std.dp, schedule=pipe.schedule.name,
                       chunks=pipe.schedule.chunks)
