"""The models the tool plans: built-in ones and those read from files.

* ``models.registry``: the built-in models, builder functions with declared
  parameters (``MODELS``), registered by ``models.cnn`` and
  ``models.sequence``;
* ``models.sources``: what ``-g`` names (a built-in model, an ONNX file, a
  Hugging Face ``config.json``) turned into a graph (:func:`build_graph`);
  the importers are ``models.onnx`` and ``models.hf_config``.

    >>> g = build_graph("transformer", batch=64, width=1024)
    >>> g.graph["params"]
    {'batch': 64, 'width': 1024, 'seq': 256, 'vocab': 50000, 'layers': 6}
"""

from __future__ import annotations

from models import cnn, sequence  # noqa: F401  (the built-in models, in the registry's order)
from models.registry import BATCH, MAX_LAYERS, MAX_SIZE, MODELS, ModelSpec, Param, build_model, check_int, model
from models.sources import build_graph, graph_names

__all__ = ["MAX_SIZE", "MAX_LAYERS", "Param", "ModelSpec", "MODELS", "model", "build_model", "check_int", "BATCH",
           "build_graph", "graph_names"]
