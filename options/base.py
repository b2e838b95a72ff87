"""What every execution option shares: the :class:`Option` base, the
:class:`Context` an option reads, and the registry (see ``options/``)."""

from __future__ import annotations

from dataclasses import dataclass

from errors import InputError

__all__ = ["Option", "OPTIONS", "register", "check_options", "Context"]

OPTIONS: dict[str, "Option"] = {}


@dataclass(frozen=True)
class Context:
    """What an option needs to know about an operator's place in the graph:
    ``block`` the block it belongs to (``None``: none), ``outside`` the
    positions of its inputs that come from outside its block (or from the
    network's inputs), ``core`` whether a selective recomputation drops
    what it keeps of its inputs or outputs at ``drops`` (input positions,
    and output positions as ``("out", j)``) and re-runs its forward
    (``replays``)."""

    block: int | None = None
    outside: frozenset = frozenset()
    drops: frozenset = frozenset()
    replays: bool = False


class Option:
    """One execution option (see the module docstring).  Subclasses set
    ``name``, ``values``, ``default``, ``scope`` and ``help``, and define
    :meth:`applies`, :meth:`work` and :meth:`memory`."""

    name: str = ""
    values: tuple = ()
    default: object = None
    scope: str = "operator"
    help: str = ""

    def applies(self, op, context: Context) -> bool:
        """Whether the option can change anything for ``op``."""
        return True

    def work(self, value, op, C, work, context: Context, rules):
        """The operator's work record (:class:`kinds.base.Work`) under
        ``value``, from the record at the default."""
        return work

    def memory(self, value, op, C, footprint, context: Context, rules):
        """The operator's memory (:class:`kinds.base.Footprint`) under
        ``value``, from the footprint at the default."""
        return footprint

    def parse(self, text: str):
        """A value from its written form (a flag, a file)."""
        for v in self.values:
            if str(v) == str(text).strip().lower():
                return v
        raise InputError(f"{self.name} must be one of {', '.join(map(str, self.values))}, got {text!r}")


def register(cls):
    """Class decorator: add an option to :data:`OPTIONS`."""
    opt = cls()
    if opt.name in OPTIONS:
        raise ValueError(f"two options are named {opt.name!r}")
    OPTIONS[opt.name] = opt
    return cls


def check_options(op, options: dict, where: str) -> tuple:
    """``options`` (name -> value) as a :class:`config_space.Decision`
    holds them: known names, valid values, those at their default left
    out; :class:`errors.InputError` naming ``where`` otherwise."""
    out = []
    for name, value in options.items():
        opt = OPTIONS.get(name)
        if opt is None:
            raise InputError(f"{where}: unknown option {name!r} (the options are {', '.join(OPTIONS)})")
        if isinstance(value, bool) or value not in opt.values:
            raise InputError(f"{where}: {name} must be one of {', '.join(map(str, opt.values))}, got {value!r}")
        if value != opt.default:
            out.append((name, value))
    return tuple(sorted(out))
