"""Kinds of mixture-of-experts layers: the router's choice of experts, and
the all-to-all exchanges that carry tokens to them and back.

A mixture-of-experts layer as Megatron-LM, DeepSpeed-MoE and torchtitan
run it: a router's logits ``(b, s, o)`` over the experts pick the top
``k`` experts of each token (:class:`TopKGating`, the routing: ``(b, s,
k)`` weights and expert ids); :class:`Dispatch` copies each token to the
buffers of its ``k`` experts, ``(x, b, c, e)`` with ``c`` slots per expert
and sample (capacity factor 1: ``c = ceil(k s / x)``); the experts run as
einsums batched over ``x``; :class:`Combine` brings each token's ``k``
results back and sums them with the routing weights (a framework that
applies the weights in the experts' activation, Megatron Core, keeps
less for the combine's backward pass: ``cost.memory.as_kept``).

Expert parallelism is a split of ``x``: dispatch and combine hold a
device's tokens split by the product of the sample and expert splits (the
experts' devices are carved out of the data-parallel ones), so their own
tokens stay where they are, and each sends its tokens' ``k`` copies spread
over the devices of its expert group, an all-to-all whose volume is set by
``k`` and the width, priced on the link it crosses (inside a node or
between nodes).  The experts' weights are split by ``x`` and replicated
over the rest: their gradients are reduced over the experts' own data
parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

from errors import InputError
from kinds.base import Comm, Kind, Operator, Ref, Tensor, Work, register


@register
@dataclass(frozen=True)
class TopKGating(Kind):
    """Top-``k`` routing of router logits ``(..., o)`` over ``o`` experts
    (the last axis): each token's ``k`` experts and weights, ``(..., k)``
    (the ``k`` axis never split).  ``groups``: the experts fall in that many
    groups and a token's experts come from its best groups (DeepSeek-V3's
    node-limited routing), a few more operations per logit.

    Space: the logits'; the experts ``o`` are never split (a token's choice
    reads all its logits).  With ``e`` the logits a device holds and ``e' =
    e / d_o`` its tokens (the reductions below are kept for the formula's
    sake: with ``o`` whole they cost nothing):

        comp = 4 * e + e * D_o          # softmax (or sigmoid) over the experts (Softmax's count)
             + k * e                    # choosing the k largest
             + 2 * e  (with groups)     # each group's score, the best groups' mask
        comm = 2 * AR(e', c_o) + AR(e' * D_o, c_o)   # the reductions over split experts
    """

    k: int
    groups: int = 0

    def build(self, name, refs):
        (x,) = refs
        if not 1 <= self.k <= x.shape[-1]:
            raise InputError(f"{name}: top-{self.k} of {x.shape[-1]} experts")
        if self.groups < 0 or (self.groups and x.shape[-1] % self.groups):
            raise InputError(f"{name}: {x.shape[-1]} experts in {self.groups} groups")
        out = Tensor(x.shape[:-1] + (self.k,), tuple(x.letters[:-1]) + ("",))
        return Operator(self, x.letters, x.shape, (Tensor(x.shape, tuple(x.letters), x.role),), (out,), name), \
            (x.letters[:-1] + "k",)

    def never_split(self, op):
        return op.dims[-1]

    def work(self, op, D, C, rules):
        o = op.dims[-1]
        e = (D / C).all  # (K,) logits per device
        tokens = e / (D[o] / C[o])  # (K,) e'
        comp = 4.0 * e + e * D[o] + self.k * e + (2.0 * e if self.groups else 0.0)
        return Work(comp, comms=(Comm("statistics", "allreduce", tokens, o, count=2.0),
                                 Comm("statistics", "allreduce", tokens * D[o], o)))

    def saved(self, op):
        return op.inputs + op.outputs


def _routed(name: str, tokens, routing, k: int, experts: int, capacity: int, limit: tuple = ()):
    """The checks and tensors dispatch and combine share: tokens ``(b, s,
    e)`` and routing ``(b, s, k)``, split by ``bx``, ``s`` and ``e``;
    ``limit`` ``(G, M)``: ``M`` of ``G`` groups that divide the experts."""
    if limit and not (len(limit) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in limit)
                      and 1 <= limit[1] < limit[0] and experts % limit[0] == 0):
        raise InputError(f"{name}: a token's experts from {limit!r} (M of G groups, 1 <= M < G, G dividing the "
                         f"{experts} experts)")
    if tokens.letters[:2] != "bs" or len(tokens.shape) != 3:
        raise InputError(f"{name}: tokens {tokens.shape} ({tokens.letters!r}) are not (b, s, e)")
    if routing.shape != tokens.shape[:2] + (k,):
        raise InputError(f"{name}: routing {routing.shape} is not top-{k} of tokens {tokens.shape}")
    if not 1 <= k <= experts or capacity < 1:
        raise InputError(f"{name}: top-{k} of {experts} experts with capacity {capacity}")
    b, s, e = tokens.shape
    dims = "xbs" + tokens.letters[2]
    space = (experts, b, s, e)
    t_in = Tensor(tokens.shape, ("bx", "s", dims[3]), tokens.role)
    r_in = Tensor(routing.shape, ("bx", "s", ""), routing.role)
    buffer = Tensor((experts, b, capacity, e), tuple(dims))  # an expert's slots split with the sequence
    return dims, space, t_in, r_in, buffer


def _exchange(op, D, C, k: int):
    """(copies a device sends and receives, tokens it holds) (K,): its
    tokens split by ``b x s`` and ``e``, each sent to ``k`` experts."""
    tokens = D["bs"] / C["bxs"] * (D[op.dims[3]] / C[op.dims[3]])  # (K,) elements of the tokens a device holds
    return k * tokens, tokens


def _alltoall(copies, k: int, experts: int, rules, limit: tuple = ()) -> Comm:
    """The all-to-all of a device's ``copies`` (each token's ``k``, to
    ``k`` of ``experts`` experts), forward and backward: each copy
    separately, or, where the framework runs DeepEP (its ``deepep``), each
    token once to each other node holding one of its experts (``limit``:
    ``(G, M)``, its experts from ``M`` of ``G`` groups)."""
    fw = getattr(rules, "framework", None)
    once = (k, experts, *limit) if fw is not None and fw.deepep else ()
    return Comm("exchange", "alltoall", copies, "x", count=2.0, once=once)


@register
@dataclass(frozen=True)
class Dispatch(Kind):
    """Tokens ``(b, s, e)`` and their routing ``(b, s, k)`` to the experts'
    buffers ``(x, b, c, e)``, ``capacity`` slots per expert and sample.

    Space ``(x, b, s, e)``, the width ``e`` never split (a token travels
    whole).  The tokens and the routing are split by the product of the
    sample and expert splits (``bx``) and the sequence; the buffers by the
    experts, the sample and, their slots, by the sequence's split.  With ``T`` the elements of the tokens a device holds:

        comp  = 2 k T                   # a copy per expert chosen, forward; its gradient summed back
        comm  = 2 * all-to-all(k T, c_x)   # forward the copies, backward their gradients
        moved = T + k T forward, 2 k T backward (elements read and written)
    """

    k: int
    experts: int
    capacity: int
    limit: tuple = ()  # (G, M): the experts in G groups, a token's from M of them (node-limited routing)

    def build(self, name, refs):
        tokens, routing = refs
        dims, space, t_in, r_in, buffer = _routed(name, tokens, routing, self.k, self.experts, self.capacity,
                                                  self.limit)
        return Operator(self, dims, space, (t_in, r_in), (buffer,), name), (dims,)

    def work(self, op, D, C, rules):
        copies, tokens = _exchange(op, D, C, self.k)
        return Work(2.0 * copies, forward=copies, comms=(_alltoall(copies, self.k, self.experts, rules, self.limit),),
                    moved=tokens + copies, moved_back=2.0 * copies)

    def never_split(self, op):
        return op.dims[3]

    def saved(self, op):
        return op.inputs[1:]  # the routing (which slot each copy went to)


@register
@dataclass(frozen=True)
class Combine(Kind):
    """The experts' outputs ``(x, b, c, e)`` back to their tokens ``(b, s,
    e)``, each token's ``k`` results summed with its routing weights
    ``(b, s, k)``: :class:`Dispatch` reversed (the same space and splits).

        comp  = 6 k T                   # a multiply-add per copy forward, twice backward
        comm  = 2 * all-to-all(k T, c_x)   # forward the results, backward their gradients
        moved = 2 k T + T forward, 3 k T backward
    """

    k: int
    experts: int
    limit: tuple = ()  # as Dispatch's

    def build(self, name, refs):
        buffer, routing = refs
        if len(buffer.shape) != 4 or buffer.shape[0] != self.experts:
            raise InputError(f"{name}: expert outputs {buffer.shape} are not ({self.experts}, b, c, e)")
        x, b, capacity, e = buffer.shape
        tokens = Ref(None, 0, (b, routing.shape[1], e), "bs" + buffer.letters[3])
        dims, space, t_out, r_in, buf = _routed(name, tokens, routing, self.k, self.experts, capacity, self.limit)
        buf = Tensor(buf.shape, buf.axes, buffer.role)
        return Operator(self, dims, space, (buf, r_in), (Tensor(t_out.shape, t_out.axes),), name), \
            ("bs" + dims[3],)

    def never_split(self, op):
        return op.dims[3]

    def work(self, op, D, C, rules):
        copies, tokens = _exchange(op, D, C, self.k)
        comms = (_alltoall(copies, self.k, self.experts, rules, self.limit),)
        return Work(6.0 * copies, forward=2.0 * copies, comms=comms,
                    moved=2.0 * copies + tokens, moved_back=3.0 * copies)

