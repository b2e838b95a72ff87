"""The result of a run: one immutable record that every output renders.

A :class:`Result` holds a strategy and every figure about it: per layer its
configuration, compute and communication; per edge its re-distribution; the
totals; the search's statistics; the settings it was costed with; and, after
``--compare``, the baselines as Results of their own.  The text report, JSON,
CSV and the comparison all read it (``report.py``); none recomputes a cost.

A searched strategy's figures are read from the cost arrays the search used
(:meth:`cost_model.CostedGraph.figures`); a given strategy's come from the
same formulas (:func:`cost_model.evaluate`); :func:`cost_model.make_result`
turns either into a Result.  This module only holds the records.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

__all__ = ["Layer", "SearchStats", "MemoryBound", "Result", "MEMORY_PARTS", "total"]

#: the parts of a device's memory, in the order ``Layer.memory`` holds them
MEMORY_PARTS = ("weights", "gradients", "optimizer state", "activations")


def total(*parts) -> float:
    """The cost of a strategy from its parts (iterables of numbers: each
    operator's compute and communication, each edge's re-distribution):
    their exact sum (``math.fsum``, so that no part is lost to rounding
    whatever the order).  Every total of a strategy is this one: the
    report's, the evaluator's and the search's own."""
    return math.fsum(itertools.chain(*parts))


@dataclass(frozen=True)
class Layer:
    """One operator of the strategy."""

    id: int
    name: str
    kind: str
    space: tuple[int, ...]
    decision: object  # config_space.Decision: the splits by letter, the options
    compute: float
    communication: float  # inside the operator
    in_space: bool  # the search space for p holds this configuration
    weights: float = 0.0  # elements of the weights one device holds
    activations: float = 0.0  # elements one device keeps for the backward pass
    memory: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # bytes: MEMORY_PARTS
    transient: float = 0.0  # bytes held only while the operator runs (gathered weights, recomputed activations)
    saves: float = 0.0  # bytes its execution options save on what it keeps

    @property
    def dims(self) -> str:
        return self.decision.dims

    @property
    def config(self) -> tuple[int, ...]:
        return self.decision.config

    @property
    def devices(self) -> int:
        return math.prod(self.config)

    @property
    def memory_bytes(self) -> float:
        return math.fsum(self.memory)

    @property
    def cost(self) -> float:
        return self.compute + self.communication


@dataclass(frozen=True)
class SearchStats:
    """How the search went.

    ``largest_K`` and ``configurations`` count the configuration space
    (largest per operator, total); ``largest_K_pruned`` and
    ``configurations_kept`` what dominance pruning left.  The dependent
    sets and tables are those of the dynamic program that ran: over the
    pruned configurations, without the operators left with one.  ``work``
    is the table entries it defines, ``work_computed`` those it computed
    (a large step computes the entries of neighbour configurations that
    it sees alike once), ``work_unpruned`` what the same order defines
    without pruning.  ``kernel``: ``numpy`` or ``fused``
    (the compiled add-and-min kernel ran for the large steps).
    """

    algo: int | None  # None: an order given by the caller
    order: str  # GENERATESEQ, breadth-first
    seconds: float  # the whole search, pruning included
    largest_K: int
    largest_dependent_set: int
    largest_table: int
    work: int  # table entries the dynamic program defines
    timings: tuple[float, ...] = ()  # --measure: repeated searches
    largest_K_pruned: int | None = None
    configurations: int | None = None
    configurations_kept: int | None = None
    work_unpruned: int | None = None
    prune_seconds: float = 0.0
    kernel: str = "numpy"
    pruned: bool = True
    repeated: tuple = ()  # the chains of repeated blocks searched once: "80 x block of 14 operators"
    work_computed: int | None = None  # of ``work``, entries computed: configurations seen alike computed once


@dataclass(frozen=True)
class MemoryBound:
    """How a search within the device memory ended (a Lagrangian relaxation:
    minimise cost + lambda * memory, see ``dp_search.within_memory``)."""

    capacity: float  # bytes per device
    status: str  # "unconstrained optimum fits", "optimal", "bound"
    lower_bound: float  # no strategy that fits costs less
    gap: float  # (cost - lower_bound) / lower_bound
    lam: float  # the multiplier of the strategy returned
    searches: int  # dynamic programs run
    least_memory: float  # the smallest memory of any strategy (bytes)


@dataclass(frozen=True)
class Result:
    """A strategy and its costs (see the module docstring).

    ``mode``: ``search``, ``evaluate`` or ``baseline``; ``key``, ``title``
    and ``label`` name a baseline (``data_parallel``, "data parallel",
    "expert (Mesh-TensorFlow: ...)").  ``model_source``: for a model read
    from a file, its ``file``, ``path`` and ``sha256``.
    """

    mode: str
    graph: str
    params: tuple[tuple[str, int], ...]
    procs: int
    cost_model: object  # cost_model.CostModel
    layers: tuple[Layer, ...]
    edges: tuple[tuple[int, int, float], ...]
    search: SearchStats | None = None
    bound: MemoryBound | None = None  # the search was held within the device memory
    source: str | None = None  # the strategy file evaluated
    key: str = ""
    title: str = ""  # short: "data parallel"
    label: str = ""  # with its description
    note: str = ""
    baselines: tuple["Result", ...] = ()
    notes: tuple[str, ...] = ()  # what the run itself has to say (an ignored flag, a limit of the model)
    rules_from: str | None = None  # the file whose recorded cost-model rules are in force
    parameters: int | None = None  # trained parameters of the model
    active_parameters: int | None = None  # a mixture of experts: the parameters one token uses
    words: float = 0.0  # elements one device sends or receives per step, inside operators and on edges
    model_source: tuple[tuple[str, str], ...] = ()  # a model read from a file: its file, path and sha256
    defaults: tuple[tuple[str, object], ...] = ()  # a model read from a file: its parameters' defaults
    transient: float = 0.0  # the most a device holds on top of what it keeps: one block's transients (bytes)
    model_flops: float | None = None  # FLOP of a step of the whole model, as MFU counts them (a real device)
    recomputed_flops: float = 0.0  # FLOP of the forward passes recomputed, counted alike
    sync: float = 0.0  # a pipeline stage's: the gradients' synchronisation per step
    sync_exposed: float = 0.0  # and what it leaves exposed under the last micro-batch's backward pass, operator by
    #                            operator (cost.time.last_sync_exposed): accumulation without stages pays it
    pipeline: object = None  # a pipelined plan (pipeline.Pipeline): its stages, schedule and step
    host: float = 0.0  # what expert layers wait on the host per step beyond their operators' costs (frameworks.host;
    #                    a pipeline: its slowest stage's, within its step)
    pooled: float = 0.0  # what the repeated blocks' overlapped collectives, pooled under each block's passes, expose
    #                      less than under each operator's own, out of the operators' communication already
    #                      (cost.evaluate.block_credits; a pipeline: per micro-batch, every stage's)
    credits: tuple = ()  # each operator's share of ``pooled`` (empty: none)

    # -- totals -----------------------------------------------------------------------
    @property
    def compute(self) -> float:
        return math.fsum(layer.compute for layer in self.layers)

    @property
    def operators_comm(self) -> float:
        return math.fsum(layer.communication for layer in self.layers)

    @property
    def edges_cost(self) -> float:
        return math.fsum(c for _, _, c in self.edges)

    @property
    def total_cost(self) -> float:
        """The cost of a step: the sum of every operator's and edge's, and
        what expert layers wait on the host beyond them (a pipeline: its
        step, see ``pipeline.py``)."""
        if self.pipeline is not None:
            return self.pipeline.step
        return total((layer.compute for layer in self.layers), (layer.communication for layer in self.layers),
                     (c for _, _, c in self.edges), (self.host,))

    @property
    def operators_cost(self) -> float:
        return total((layer.compute for layer in self.layers), (layer.communication for layer in self.layers))

    @property
    def communication(self) -> float:
        """Inside operators and on edges (summed by itself: the total less the
        compute would lose it when compute dwarfs it)."""
        return math.fsum([*(layer.communication for layer in self.layers), *(c for _, _, c in self.edges)])

    @property
    def comm_bytes_per_device(self) -> float:
        """Communication of one device per step, in bytes: the elements it
        moves (whatever the links' speeds and latency) at the precision's
        bytes."""
        return self.cost_model.cluster.word_bytes * self.words

    @property
    def memory(self) -> tuple[float, ...]:
        """Per-device bytes of each of :data:`MEMORY_PARTS`, summed over the
        layers: an upper bound for every device (see docs/memory.md); for a
        pipeline, its peak stage's, with the activations of the
        micro-batches it keeps."""
        if self.pipeline is not None:
            stage = self.pipeline.peak_stage
            parts = stage.result.memory
            return parts[:3] + (stage.in_flight * parts[3],)
        return tuple(math.fsum(layer.memory[i] for layer in self.layers) for i in range(len(MEMORY_PARTS)))

    @property
    def kept_bytes(self) -> float:
        """What a device keeps for the whole step."""
        return math.fsum(self.memory)

    @property
    def memory_bytes(self) -> float:
        """The peak of a device: what it keeps, and the most it holds on top
        of that at one time (:attr:`transient`)."""
        if self.pipeline is not None:
            return self.pipeline.peak_memory
        return math.fsum([*self.memory, self.transient])

    @property
    def beyond_tensors(self) -> tuple[float, float] | None:
        """What the framework's process holds beyond the tensors' peak
        (:meth:`frameworks.Framework.beyond`): the caching allocator's
        reserve, and the CUDA context and NCCL's buffers outside it; ``None``
        without a framework."""
        fw = self.cost_model.framework
        return None if fw is None else fw.beyond(self.memory_bytes)

    @property
    def reserved_bytes(self) -> float | None:
        """The allocator's peak as a framework runs the plan (tensors and
        its reserve: what ``torch.cuda.max_memory_reserved`` reports)."""
        extra = self.beyond_tensors
        return None if extra is None else self.memory_bytes + extra[0]

    @property
    def capacity(self) -> float | None:
        """Bytes per device a plan may use (its memory less the headroom),
        if the cluster says."""
        return self.cost_model.cluster.capacity

    @property
    def sharded_gradients(self) -> bool:
        """Whether every operator with weights shards its gradients (ZeRO
        stage 2 or 3)."""
        sharded = self._sharding()
        return bool(sharded) and all(sharded)

    @property
    def some_sharded_gradients(self) -> bool:
        """Whether some operator with weights shards its gradients."""
        return any(self._sharding())

    def _sharding(self) -> list[bool]:
        """Per operator with weights, whether it shards its gradients."""
        return [(x.decision.option("zero") or 0) >= 2 for x in self.layers if x.weights > 0]

    @property
    def fits(self) -> bool | None:
        cap = self.capacity
        return None if cap is None else self.memory_bytes <= cap * (1 + 1e-12)  # sums in another order

    @property
    def step_seconds(self) -> float:
        """Predicted time of one training step: the cost at the device's FLOPS."""
        return self.cost_model.cluster.seconds(self.total_cost)

    @property
    def tokens(self) -> int | None:
        """Tokens of a step (batch times sequence) for a sequence model, else
        ``None``."""
        batch, seq = self.param("batch"), self.param("seq")
        return batch * seq if batch is not None and seq is not None else None

    @property
    def mfu(self) -> float | None:
        """Model FLOP utilisation: the model's FLOP per step over what the
        devices' peak does in the step time (a real device only)."""
        if self.model_flops is None or not self.step_seconds:
            return None
        return self.model_flops / (self.procs * self.cost_model.cluster.flops * 1e12 * self.step_seconds)

    @property
    def hardware_flops(self) -> float | None:
        """FLOP of a step the devices run as Narayanan et al. count them:
        the model's and the forward passes recomputed."""
        return None if self.model_flops is None else self.model_flops + self.recomputed_flops

    @property
    def in_search_space(self) -> bool:
        return all(layer.in_space for layer in self.layers)

    @property
    def strategy(self) -> list:
        """One :class:`config_space.Decision` per operator."""
        return [layer.decision for layer in self.layers]

    def param(self, name: str, default=None):
        return dict(self.params).get(name, default)

    # -- baselines --------------------------------------------------------------------
    def baseline(self, key: str) -> "Result | None":
        return next((b for b in self.baselines if b.key == key), None)

    def speedup(self, of: "Result | None" = None) -> float | None:
        """The predicted speedup over data parallelism (the ratio of costs) of
        this result, or of ``of`` (one of its baselines); ``None`` without the
        data-parallel baseline."""
        dp = self.baseline("data_parallel")
        cost = (self if of is None else of).total_cost
        return None if dp is None or cost == 0 else dp.total_cost / cost  # nothing to speed up: no figure

    def with_baselines(self, baselines) -> "Result":
        return replace(self, baselines=tuple(baselines))
