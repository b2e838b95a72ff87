"""Where a model comes from: the ``-g`` argument turned into a graph.

The argument is a built-in model's name (:data:`models.MODELS`), an ONNX
file (``*.onnx``, read by :mod:`models.onnx`), a Hugging Face
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

from errors import SettingError
from models.files import ModelFileError, file_identity
from models.registry import MODELS, build_model

__all__ = ["ModelFileError", "build", "build_graph", "graph_names", "locate", "file_identity", "is_file_argument"]


def is_file_argument(arg: str) -> bool:
    """Whether ``arg`` names a file or directory rather than a built-in model."""
    return arg not in MODELS and (os.sep in arg or arg.lower().endswith((".onnx", ".json")) or os.path.lexists(arg))


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
        found = [n for n in names if n.lower().endswith(".onnx")]
        config = "config.json" in names
        if config and not found:
            return "config", os.path.join(arg, "config.json")
        if len(found) == 1 and not config:
            return "onnx", os.path.join(arg, found[0])
        if not found:
            what = "no config.json or .onnx file"
        elif len(found) == 1:
            what = f"both config.json and {found[0]}"
        else:
            what = f"{len(found)} .onnx files ({', '.join(found[:3])})" + (" and config.json" if config else "")
        raise ModelFileError(f"{arg}: {what} in this directory; name the model file")
    if not os.path.exists(arg):
        from readers import missing

        raise ModelFileError(missing(arg))
    if arg.lower().endswith(".onnx"):
        return "onnx", arg
    if arg.lower().endswith(".json"):
        return "config", arg
    raise ModelFileError(f"{arg}: not a model file the tool reads (an .onnx file or a config.json)")


def build(graph: str, **params):
    """The graph ``graph`` names (a built-in model or a file) with ``params``
    (``batch``, ``seq``, ...; those not given keep the model's defaults)."""
    if graph in MODELS:
        return build_model(graph, **params)
    kind, path = locate(graph)
    if kind == "onnx":
        from models.onnx import load_onnx

        return load_onnx(path, **params)
    from models.hf_config import load_config

    return load_config(path, **params)


def build_graph(name: str, batch: int | None = None, width: int | None = None, **params):
    """Build the model ``name``: a built-in one (see :func:`graph_names`), an
    ONNX file, a Hugging Face ``config.json`` or a directory holding one,
    with its parameters (``batch``, ``width``, ``seq``...; ``None`` keeps a
    default).  Raises :class:`errors.InputError` on bad input."""
    given = {k: v for k, v in dict(params, batch=batch, width=width).items() if v is not None}
    return build(name, **given)


def build_first_layers(name: str, first: int, batch: int | None = None, **params):
    """The model ``name`` with only its ``first`` layers where it is
    a config (a decoder: its layers are its repeated blocks), and how many
    it has; ``None`` for other models."""
    given = {k: v for k, v in dict(params, batch=batch).items() if v is not None}
    if name in MODELS or locate(name)[0] != "config":
        return None
    from models.hf_config import load_config

    g = load_config(locate(name)[1], layers_at_most=first, **given)
    return g, g.graph["layers"]


def graph_names() -> tuple[str, ...]:
    """The built-in models' names."""
    return tuple(MODELS)
