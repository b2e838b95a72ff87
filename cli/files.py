"""The files the command line writes: checked before any work, written
atomically (plan files are read by :mod:`plan_file`)."""

from __future__ import annotations

import os

from cli.args import UsageError

# -- input files ----------------------------------------------------------------


class Reads:
    """The files a run reads (``files``: real path -> what names it) and the
    model directories ``-g`` names (real path -> the argument), found from
    the settings before any work, so that no output replaces an input."""

    def __init__(self, s):
        self.files: dict[str, str] = {}
        self.dirs: dict[str, str] = {}
        graphs = dict(getattr(s, "sweep", ()) or ()).get("graph", (s.graph,))
        for graph in graphs:
            self._model(graph, "-g")
        self._add(s.cluster, "the cluster file --cluster reads")
        if s.evaluate is not None:
            self._add(s.evaluate, "the plan file --evaluate reads")
            if "graph" not in s.explicit:
                self._plan_model(s.evaluate)
        if getattr(s, "calibrate", None) is not None:
            self._add(s.calibrate, "the measurements file --calibrate reads")
            self._measurements(s.calibrate)

    def _add(self, path, what: str) -> None:
        if isinstance(path, str) and path:
            self.files.setdefault(os.path.realpath(path), what)

    def _model(self, graph, flag: str) -> None:
        if not isinstance(graph, str) or not (os.sep in graph or graph.lower().endswith((".onnx", ".json"))
                                              or os.path.exists(graph)):
            return  # a built-in model's name (nothing imported for it)
        from errors import InputError
        from models.sources import is_file_argument, locate

        if not is_file_argument(graph):
            return
        if os.path.isdir(graph):
            self.dirs.setdefault(os.path.realpath(graph), graph)
        try:
            _, path = locate(graph)
        except InputError:  # the run says why, in its turn
            return
        self._add(path, f"the model file {flag} reads")

    def _plan_model(self, path: str) -> None:
        """The model file a plan file names (where it was, or beside it)."""
        from errors import InputError
        from plan_file import read

        try:
            model = read(path).recorded.get("model")
        except InputError:
            return
        if model is not None:
            for where in (model.get("path"), os.path.join(os.path.dirname(path), model["source"])):
                if isinstance(where, str) and where and os.path.exists(where):
                    self._add(where, "the model file the plan --evaluate reads names")
                    return

    def _measurements(self, path: str) -> None:
        """The files a measurements file names: nccl_file and step.plan."""
        from errors import InputError

        try:
            from cluster.calibrate import read_measurements

            data = read_measurements(path)
        except InputError:
            return
        here = os.path.dirname(path)
        if isinstance(data.get("nccl_file"), str):
            self._add(os.path.join(here, data["nccl_file"]), "the nccl-tests output --calibrate reads")
        step = data.get("step")
        if isinstance(step, dict) and isinstance(step.get("plan"), str):
            self._add(os.path.join(here, step["plan"]), "the plan file --calibrate's step reads")

    def check(self, path: str, flag: str) -> None:
        """Refuse an output ``path`` that is one of the files read, or would
        become what a model directory gives ``-g`` (its config.json or an
        .onnx file)."""
        where = os.path.realpath(path)
        what = self.files.get(where)
        if what is not None:
            raise UsageError(f"{flag}: {path} is {what}; give another path")
        folder = self.dirs.get(os.path.dirname(where))
        name = os.path.basename(where).lower()
        if folder is not None and (name == "config.json" or name.endswith(".onnx")):
            raise UsageError(f"{flag}: {path} would be read as the model of {folder} (-g); give another path")


# -- output files ---------------------------------------------------------------


def check_writable(path: str, flag: str, reads: Reads | None = None) -> None:
    """Refuse, before any work, a path we could not write, or (with
    ``reads``) one that is an input of the run."""
    if not path:
        raise UsageError(f"{flag}: the path is empty")
    if reads is not None:
        reads.check(path, flag)
    target = os.path.realpath(path)
    if _loops(path):
        raise UsageError(f"{flag}: {path} is a symbolic link that loops")
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
        folder = os.path.dirname(path) or "."
        while folder and not os.path.lexists(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)  # the part of the path that exists
        if folder and os.path.lexists(folder) and not os.path.isdir(folder):
            raise UsageError(f"{flag}: {folder} is not a directory")
        raise UsageError(f"{flag}: directory {os.path.dirname(path) or '.'} does not exist")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{flag}: {path} is not writable")
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".pase-", suffix=".tmp"):
            pass
    except OSError as e:
        why = "it takes no new files" if isinstance(e, FileNotFoundError) else (e.strerror or str(e)).lower()
        raise UsageError(f"{flag}: cannot write in {parent}: {why}") from None


def _loops(path: str) -> bool:
    """Whether ``path`` is, or passes through, a symbolic link that loops."""
    import errno

    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


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


