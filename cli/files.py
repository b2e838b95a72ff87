"""The files the command line writes: checked before any work, written
atomically (plan files are read by :mod:`plan_file`)."""

from __future__ import annotations

import os

from cli.args import UsageError

# -- output files ---------------------------------------------------------------


def check_writable(path: str, flag: str) -> None:
    """Refuse, before any work, a path we could not write."""
    if not path:
        raise UsageError(f"{flag}: the path is empty")
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise UsageError(f"{flag}: {path} is a directory")
    if os.path.exists(target) and not os.path.isfile(target):  # /dev/null, a FIFO: written in place
        if not os.access(target, os.W_OK):
            raise UsageError(f"{flag}: {path} is not writable")
        return
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        if os.path.islink(path):
            raise UsageError(f"{flag}: {path} is a link to {target}, whose directory {parent} does not exist")
        raise UsageError(f"{flag}: directory {os.path.dirname(path) or '.'} does not exist")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{flag}: {path} is not writable")
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".pase-", suffix=".tmp"):
            pass
    except OSError as e:
        raise UsageError(f"{flag}: cannot write in {parent}: {e.strerror}") from None


def write_atomic(path: str, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` through a temporary file
    renamed into place, so that an error never leaves a half-written file.
    A symbolic link is followed (the link stays), an existing file keeps
    its permissions, and a special file (``/dev/null``) is simply written."""
    import tempfile

    how = {"mode": "wb"} if isinstance(text, bytes) else {"mode": "w", "encoding": "utf-8", "newline": ""}
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(target, **how) as f:
            f.write(text)
        return
    mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".pase-", suffix=".tmp")
    try:
        with os.fdopen(fd, **how) as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


