"""Where a model comes from: the ``-g`` argument turned into a graph.

The argument is a built-in model's name (:data:`models.MODELS`), an ONNX
file (``*.onnx``, read by :mod:`models.onnx_import`), a Hugging Face
``config.json`` (:mod:`models.hf_config`), or a directory holding one of
those.  Every path ends in a :class:`graph.GraphBuilder` graph, so nothing
downstream knows where a graph came from; a graph read from a file carries
``source`` (its file name, absolute path and SHA-256), which strategy files
record.  Nothing here imports ``onnx`` unless an ONNX file is read.

    >>> build("alexnet", batch=64).graph["name"]
    'alexnet'
"""

from __future__ import annotations

import os

from errors import InputError, SettingError
from models import MODELS, build_model

__all__ = ["ModelFileError", "build", "locate", "file_identity", "is_file_argument"]


class ModelFileError(InputError):
    """A model file that cannot be read or planned: one line naming the file."""


def is_file_argument(arg: str) -> bool:
    """Whether ``arg`` names a file or directory rather than a built-in model."""
    return arg not in MODELS and (os.sep in arg or arg.lower().endswith((".onnx", ".json")) or os.path.exists(arg))


def locate(arg: str) -> tuple[str, str]:
    """``("onnx" | "config", path)`` for a model file or a directory holding
    one; a :class:`SettingError` for anything else."""
    if not is_file_argument(arg):
        raise SettingError("graph", f"must be one of {', '.join(MODELS)}, got {arg!r} "
                                    "(or an .onnx file, a config.json, or a directory holding one)")
    if os.path.isdir(arg):
        try:
            names = sorted(os.listdir(arg))
        except OSError as e:
            raise ModelFileError(f"{arg}: cannot list the directory: {e.strerror}") from None
        if "config.json" in names:
            return "config", os.path.join(arg, "config.json")
        found = [n for n in names if n.lower().endswith(".onnx")]
        if len(found) == 1:
            return "onnx", os.path.join(arg, found[0])
        what = "no config.json or .onnx file" if not found else f"{len(found)} .onnx files ({', '.join(found[:3])})"
        raise ModelFileError(f"{arg}: {what} in this directory; name the model file")
    if not os.path.exists(arg):
        raise ModelFileError(f"{arg}: no such file")
    if arg.lower().endswith(".onnx"):
        return "onnx", arg
    if arg.lower().endswith(".json"):
        return "config", arg
    raise ModelFileError(f"{arg}: not a model file the tool reads (an .onnx file or a config.json)")


def file_identity(path: str) -> dict:
    """The file name, absolute path and SHA-256 of a model file."""
    import hashlib  # only a model read from a file needs it

    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read it: {e.strerror}") from None
    return {"file": os.path.basename(path), "path": os.path.abspath(path), "sha256": digest.hexdigest()}


def build(graph: str, **params):
    """The graph ``graph`` names (a built-in model or a file) with ``params``
    (``batch``, ``seq``, ...; those not given keep the model's defaults)."""
    if graph in MODELS:
        return build_model(graph, **params)
    kind, path = locate(graph)
    if kind == "onnx":
        from models.onnx_import import load_onnx

        return load_onnx(path, **params)
    from models.hf_config import load_config

    return load_config(path, **params)
