"""The cost model as a package, one module per idea; ``cost_model.py`` is
the entry point that re-exports what callers use.

- :mod:`cost.rules`: the model's rules and constants (:class:`CostModel`).
- :mod:`cost.time`: the time of a piece of work on a device (the paper's
  FLOP, the roofline, collectives, overlap).
- :mod:`cost.edges`: the time of re-distributing a tensor on an edge.
- :mod:`cost.memory`: the bytes an operator keeps.
- :mod:`cost.tables`: the arrays the search reads (:class:`CostedGraph`).
- :mod:`cost.evaluate`: a strategy's figures and its :class:`result.Result`.

The modules import each other in that order only (rules <- time <- edges,
memory <- tables <- evaluate).
"""
