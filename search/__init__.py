"""The numeric parts of the strategy search, used by :mod:`dp_search`.

* :mod:`search.prune`: dominance pruning, which drops configurations that
  cannot change the optimum before the dynamic program runs;
* :mod:`search.contract`: the dynamic program's (min, +) contraction, with
  numpy, or with a fused add-and-min kernel (:mod:`search.fused`, numba)
  for large searches.

Everything here reads plain arrays (node cost vectors, edge cost matrices);
nothing knows about operators or cost models.  Importing the package is
light: numba loads only when a large contraction asks for the fused kernel.
"""
