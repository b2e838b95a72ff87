"""Reading the small files the tool takes as input (strategy files, cluster
files, model configs): whole, up to a bound on their size, with one-line
``ValueError`` messages naming the file for anything unreadable."""

from __future__ import annotations

import json

from errors import InputError

__all__ = ["read_bytes", "read_text", "read_json"]


def read_bytes(path: str, limit: int, what: str) -> bytes:
    """The bytes of ``path``, refused beyond ``limit`` bytes (``what`` names
    the kind of file in the message): a regular file by its size, before
    reading it; anything else (a device, a pipe) after ``limit + 1`` bytes."""
    import os
    import stat

    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            raw = None if stat.S_ISREG(info.st_mode) and info.st_size > limit else f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    except MemoryError:
        raw = None
    if raw is None or len(raw) > limit:
        raise InputError(f"{path} is larger than {limit / 2**20:g} MB: not a {what}")
    return raw


def read_text(path: str, limit: int, what: str) -> str:
    """The UTF-8 text of ``path``, refused beyond ``limit`` bytes (``what``
    names the kind of file in the message)."""
    raw = read_bytes(path, limit, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a text file") from None


def read_json(path: str, limit: int, what: str):
    """The JSON document in ``path`` (see :func:`read_text`)."""
    text = read_text(path, limit, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON (line {e.lineno} column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to be a {what}") from None
    except ValueError as e:  # e.g. an integer of thousands of digits
        why = "a number has too many digits" if "digits" in str(e) else type(e).__name__
        raise InputError(f"{path} is not a usable JSON file ({why})") from None
