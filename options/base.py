"""What every execution option shares: the :class:`Option` base, the
:class:`Context` an option reads, and the registry (see ``options/``)."""

from __future__ import annotations

from dataclasses import dataclass

from errors import InputError

__all__ = ["Option", "OPTIONS", "register", "check_options", "Context", "contexts", "products_of", "MODULES"]

OPTIONS: dict[str, "Option"] = {}

#: the modules a recomputation of single modules names (Megatron-LM's --recompute-modules): ``core_attn`` the
#: attention core (the softmax's probabilities: what ``selective`` drops), ``layernorm`` a block's norms of the
#: residual stream that no product takes in alone (Megatron Core with Transformer Engine fuses a norm read by one
#: product into it: a mixture of experts' pre-MLP norm, read by the router and the dispatch, stays apart), and
#: ``moe_act`` the experts' activation
MODULES = ("core_attn", "layernorm", "moe_act")
NORMS = ("Norm", "RMSNorm", "RMSNormOver")


@dataclass(frozen=True)
class Context:
    """What an option needs to know about an operator's place in the graph:
    ``block`` the block it belongs to (``None``: none), ``outside`` the
    positions of its inputs that come from outside its block (or from the
    network's inputs), what a selective recomputation drops of the tensors
    it keeps (``drops``: ``("in", i)``, ``("out", j)``, ``("own", None)``)
    and whether it re-runs its forward pass then (``replays``), and
    ``shared``: the
    positions of weights another operator holds (a tied embedding);
    ``products``: for a weighted matrix product of a block, how many
    separate products (:func:`products_of`) the block runs before it, in
    the order of its operators (torchtitan's op-level selective
    recomputation saves every second one); ``module``: the module of
    :data:`MODULES` it is, which a recomputation of single modules re-runs
    (``""``: none), and ``module_drops``: ``(module, origin)`` of what it
    keeps that such a recomputation drops (a module's output it reads)."""

    block: int | None = None
    outside: frozenset = frozenset()
    drops: frozenset = frozenset()
    replays: bool = False
    shared: frozenset = frozenset()
    products: int = 0
    module: str = ""
    module_drops: frozenset = frozenset()

    @property
    def key(self) -> tuple:
        """What the options' effects depend on (not which block it is):
        operators equal up to names with equal keys have equal arrays."""
        return (self.block is not None, self.outside, self.drops, self.replays, self.shared, self.products % 2,
                self.module, self.module_drops)


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


def contexts(g, chains=()) -> list[Context]:
    """Each operator's :class:`Context` in graph ``g`` whose repeated
    blocks are ``chains`` (:func:`blocks.find_chains`): its block, the
    inputs it reads from outside the block, the weights another operator
    holds, and for a selective recomputation, what the attention core drops
    and re-runs: the output of each Softmax of a block (kept by the softmax
    and by the operators of the block that read it, and of a dropout right
    after it with its mask), re-made by the softmax, that dropout and the
    operator of the block that feeds the softmax."""
    from blocks import block_of
    from graph import operators

    ops = operators(g)
    n = len(ops)
    block = block_of(chains, n)
    shared = {}
    for v, i in g.graph.get("shared", ()):
        shared.setdefault(v, set()).add(i)
    drops = {v: set() for v in range(n)}
    replays = set()
    reads = []  # the node writing each input (None: a graph input; weights a kind adds itself included)
    for v in range(n):
        r = tuple(g.nodes[v].get("reads", ()))
        reads.append(r + (None,) * (len(ops[v].inputs) - len(r)))
    for v, op in enumerate(ops):
        if block[v] is None or op.kind.name != "Softmax":
            continue
        core = {v} | {w for w in g.successors(v) if block[w] == block[v] and ops[w].kind.name == "Dropout"}
        for c in core:  # the probabilities, and a dropout's mask of them
            drops[c] |= {("out", 0), ("own", None)}
        replays.update(core)
        replays.update(u for u in reads[v] if u is not None and block[u] == block[v])
        for c in core:
            for w in g.successors(c):
                if block[w] == block[v] and w not in core:
                    drops[w].update(("in", i) for i, u in enumerate(reads[w]) if u == c)
    module, mdrops = _modules(g, ops, block, reads)
    before, seen = {}, {}  # products of each block so far; each weighted product's count before it
    for v, op in enumerate(ops):
        if block[v] is not None and products_of(op):
            seen[v] = before.get(block[v], 0)
            before[block[v]] = seen[v] + len(products_of(op))
    out = []
    for v in range(n):
        b = block[v]
        outside = frozenset(i for i, u in enumerate(reads[v]) if u is None or block[u] != b) if b is not None \
            else frozenset()
        out.append(Context(b, outside, frozenset(drops[v]), v in replays, frozenset(shared.get(v, ())),
                           seen.get(v, 0), module.get(v, ""), frozenset(mdrops.get(v, ()))))
    return out


def _modules(g, ops, block, reads) -> tuple[dict, dict]:
    """The operators of each single module (:data:`MODULES` but the
    attention core) in the blocks, and what their readers in the block
    keep of them: ``({node: module}, {node: {(module, ("in", i))}})``.
    A norm of the residual stream: its input written outside the block or
    by no weighted product, its result read by a weighted product or a
    dispatch, and not by one weighted product alone; the experts'
    activation: an element-wise operator over the expert axis."""
    expert = g.graph.get("roles", {}).get("expert", "")
    module, mdrops = {}, {}
    for v, op in enumerate(ops):
        if block[v] is None:
            continue
        name = None
        if op.kind.name in NORMS:
            src = reads[v][0]
            readers = [w for w in g.successors(v) if block[w] == block[v]]
            stream = src is None or block[src] != block[v] or not products_of(ops[src])
            feeds = any(products_of(ops[w]) or ops[w].kind.name == "Dispatch" for w in readers)
            alone = len(readers) == 1 and products_of(ops[readers[0]])
            name = "layernorm" if stream and feeds and not alone else None
        elif op.kind.name == "Elementwise" and expert and expert in op.dims:
            name = "moe_act"
        if name is None:
            continue
        module[v] = name
        for w in g.successors(v):
            if block[w] == block[v]:
                mdrops.setdefault(w, set()).update((name, ("in", i)) for i, u in enumerate(reads[w]) if u == v)
    return module, mdrops


def products_of(op) -> tuple:
    """The separate matrix products a weighted product operator (an
    einsum or a fully connected layer with a weight) stands for, as the
    parts of its output each makes (:class:`kinds.gemm.Einsum`'s
    ``products``; one when it does not say); empty for any other
    operator."""
    if op.kind.name not in ("Einsum", "FC") or not any(t.role == "weight" for t in op.inputs):
        return ()
    return tuple(getattr(op.kind, "products", ())) or (1,)
