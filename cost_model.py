"""The PaSE cost model: FLOP (or, on a real device, time) of every
configuration of every operator, and of every pair of configurations on
every edge.

Each operator kind defines its own formula (``kinds/``, after the PaSE paper,
Elango, IPDPS 2021, section III); the :mod:`cost` package runs them over all
configurations at once and adds the re-distribution of tensors on edges.  A
:class:`CostModel` is the machine (a :class:`cluster.Cluster`) plus the
modelling rules; the defaults are the original tool's, whose numbers the
tests check.  Everything is vectorised: an operator's ``K`` configurations
are an integer array ``(K, n)`` and its cost a vector ``(K,)``; an edge's
cost is a ``(K_src, K_tgt)`` matrix.

This module is the entry point: it re-exports what callers use from the
package, where each idea has its own module:

==================  ==========================================================
``cost.rules``      :class:`CostModel`, its constants, :func:`check_procs`
``cost.time``       :func:`price` (paper's FLOP or the realistic roofline,
                    collectives and overlap), :func:`edge_costs`
``cost.memory``     :func:`op_memory`, :func:`footprint`
``cost.tables``     :func:`build_costs` -> :class:`CostedGraph` (what the
                    search reads), :func:`estimate_costs`
``cost.evaluate``   :func:`evaluate` -> :class:`StrategyCost`,
                    :func:`make_result`, :func:`model_flops`
==================  ==========================================================

The same functions cost any configuration whose splits divide the
dimensions, inside the enumerated space or not (baselines need that); they
do not check divisibility themselves (:func:`check_strategy` does).
"""

from __future__ import annotations

from cost.evaluate import (StrategyCost, check_strategy, evaluate, make_result, model_flops, recomputed_flops,
                           words_moved)
from cost.memory import footprint, op_memory
from cost.rules import AUTO, EMBEDDING_SYNC, MAX_PROCS, OPTIMIZERS, CostModel, check_procs
from cost.tables import (CostedGraph, CostEstimate, CostTablesTooLarge, NodeArrays, OptionTable, build_costs,
                         estimate_costs, node_arrays, with_edges, with_options)
from cost.edges import edge_costs
from cost.time import collective_cost, op_cost_parts, op_costs, op_work, price, price_stage, traffic

__all__ = [
    "AUTO",
    "EMBEDDING_SYNC",
    "CostModel",
    "CostedGraph",
    "CostTablesTooLarge",
    "CostEstimate",
    "NodeArrays",
    "OptionTable",
    "estimate_costs",
    "StrategyCost",
    "collective_cost",
    "footprint",
    "node_arrays",
    "op_cost_parts",
    "op_costs",
    "op_memory",
    "op_work",
    "edge_costs",
    "OPTIMIZERS",
    "build_costs",
    "check_procs",
    "check_strategy",
    "evaluate",
    "MAX_PROCS",
    "make_result",
    "model_flops",
    "price",
    "price_stage",
    "recomputed_flops",
    "traffic",
    "with_edges",
    "with_options",
    "words_moved",
]
