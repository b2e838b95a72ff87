"""Operator kinds: one definition per kind, and the registry of them all.

Each kind is a frozen dataclass deriving from :class:`Kind` and decorated
with :func:`register` (both in ``kinds.base``), in one of this package's modules (grouped by family:
``conv``, ``gemm``, ``pointwise``, ``shape``, ``recurrent``, ``moe``).  Every module
here is imported when the package is, so a new kind needs its definition
(and its test) and nothing else.  ``KINDS`` maps a kind's name to its class.

    >>> from kinds import KINDS
    >>> KINDS["Conv"](out=96, kernel=11, stride=4).stride
    (4, 4)
"""

from __future__ import annotations

import importlib
import os

from kinds.base import (
    KINDS,
    Comm,
    Extents,
    Footprint,
    Kind,
    Operator,
    Ref,
    Tensor,
    Work,
    gemm,
    halo,
    need,
    register,
    shard,
    tensor_splits,
)

__all__ = ["KINDS", "register", "Kind", "Operator", "Tensor", "Ref", "Extents", "Comm", "Work", "Footprint", "gemm",
           "halo", "need", "shard", "tensor_splits"]

for _file in sorted(os.listdir(__path__[0])):  # every module of the package (os: cheaper than pkgutil)
    if _file.endswith(".py") and _file not in ("__init__.py", "base.py"):
        importlib.import_module(f"{__name__}.{_file[:-3]}")
