"""Reading the small files the tool takes as input (strategy files, cluster
files, model configs): whole, up to a bound on their size, with one-line
``ValueError`` messages naming the file for anything unreadable.  Only a
regular file is read (a FIFO would wait for a writer, a device never end)."""

from __future__ import annotations

import json
import os

from errors import InputError

__all__ = ["read_bytes", "read_text", "read_json", "document", "missing", "check_regular"]


def missing(path: str) -> str:
    """Why ``path`` cannot be opened although it was named: no such file, a
    symbolic link to nothing, or one that loops."""
    import os

    if os.path.islink(path):
        try:
            os.stat(path)
        except OSError as e:
            import errno

            if e.errno == errno.ELOOP:
                return f"{path} is a symbolic link that loops"
        return f"{path} is a link to {os.path.realpath(path)}, which does not exist"
    return f"{path}: no such file"


def check_regular(path: str) -> int:
    """The size of the regular file ``path``; an :class:`InputError` for
    anything else (no such file, a directory, a FIFO, a device)."""
    import errno
    import os
    import stat

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(missing(path)) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{path} is a symbolic link that loops") from None
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path} is a directory")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode) or \
            stat.S_ISBLK(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "a special file"
        raise InputError(f"{path} is {kind}, not a regular file")
    return info.st_size


def read_bytes(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, refused beyond ``limit`` bytes
    (``what`` names the kind of file in the message) by its size, before
    reading it; the buffer read into is the file's size, not ``limit``."""
    import os
    import stat

    size = check_regular(path)
    if size > limit:
        raise InputError(f"{path} is larger than {limit / 2**20:g} MB: not a {what}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # replaced by a FIFO since: no wait
        with open(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{path} is not a regular file")
            raw = f.read(min(info.st_size, limit) + 1)  # one byte more: a file that grew past the limit shows it
    except FileNotFoundError:
        raise InputError(missing(path)) from None
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


def read_toml(path: str, limit: int, what: str):
    """The TOML document in ``path`` (see :func:`read_text`)."""
    import tomllib

    return _parsed(path, what, "TOML", tomllib.loads, read_text(path, limit, what),
                   lambda e: f"({e})" if isinstance(e, tomllib.TOMLDecodeError) else None)


def read_json(path: str, limit: int, what: str):
    """The JSON document in ``path`` (see :func:`read_text`)."""
    return _parsed(path, what, "JSON", json.loads, read_text(path, limit, what),
                   lambda e: f"(line {e.lineno} column {e.colno}: {e.msg})" if isinstance(e, json.JSONDecodeError)
                   else None)


def _parsed(path: str, what: str, kind: str, loads, text: str, where):
    """``loads(text)``, or one line naming ``path``: where the parser says
    it is not valid ``kind`` (``where(e)``), nested too deeply, or a number
    too long to read."""
    try:
        return loads(text)
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to be a {what}") from None
    except ValueError as e:
        said = where(e)
        if said is not None:
            raise InputError(f"{path} is not valid {kind} {said}") from None
        why = "a number has too many digits" if "digits" in str(e) else type(e).__name__  # thousands of digits
        raise InputError(f"{path} is not a usable {kind} file ({why})") from None


def document(source, limit: int, what: str, error=None):
    """A JSON document given as a file's path (read by :func:`read_json`)
    or as its text (anything that starts with ``{``); ``error``: the
    exception class a reader's own callers expect (unreadable, too large,
    not JSON said in one line as that error), else :class:`InputError`."""
    if error is not None:
        try:
            return document(source, limit, what)
        except InputError as e:
            raise error(str(e)) from None
    if isinstance(source, (str, os.PathLike)) and not str(source).lstrip().startswith("{"):
        return read_json(os.fspath(source), limit, what)
    try:
        return json.loads(source)
    except (ValueError, TypeError, RecursionError) as e:
        raise InputError(f"not a JSON document: {e}") from None
