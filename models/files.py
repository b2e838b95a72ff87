"""What the model importers share: their error, and a model file's identity
(its name, absolute path and SHA-256, which strategy files record)."""

from __future__ import annotations

import os

from errors import InputError

__all__ = ["ModelFileError", "file_identity"]


class ModelFileError(InputError):
    """A model file that cannot be read or planned: one line naming the file."""


def file_identity(path: str, data: bytes | None = None) -> dict:
    """The file name, absolute path and SHA-256 of a model file (of
    ``data``, its contents, when they were read already)."""
    import hashlib  # only a model read from a file needs it

    digest = hashlib.sha256()
    if data is not None:
        digest.update(data)
        return {"file": os.path.basename(path), "path": os.path.abspath(path), "sha256": digest.hexdigest()}
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read it: {e.strerror}") from None
    return {"file": os.path.basename(path), "path": os.path.abspath(path), "sha256": digest.hexdigest()}
