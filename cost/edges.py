"""The re-distribution of a tensor on an edge: what moving it from the
split its producer leaves to the split its consumer reads costs, for every
pair of their configurations ``(K_src, K_tgt)`` (the PaSE paper's
``need``, Elango, IPDPS 2021, section III; between nodes, the words a
target node lacks), pipelined under the consumer's products where the run
overlaps tensor parallelism."""

from __future__ import annotations

import numpy as np

from cost.rules import CostModel, extents
from cost.time import overlap_pieces, pipelined
from graph import Operator
from kinds import need, tensor_splits

__all__ = ["edge_costs"]


def edge_costs(src: Operator, out: int, tgt: Operator, inp: int, src_configs, tgt_configs,
               model: CostModel, fp8: bool = False, rules: CostModel | None = None, room=None) -> np.ndarray:
    """Re-distribution cost (K_src, K_tgt) of the tensor ``src.outputs[out]``
    read as ``tgt.inputs[inp]`` (as it arrives there:
    :meth:`kinds.base.Kind.arriving`), forward and backward:
    ``2 W need(T/S, T/Q, P(S), P(Q))``; ``fp8``: the input of a Float8
    product that the framework re-distributes at a byte per element
    forward (:func:`cost.rules.float8_input`), its gradient backward in the
    training precision; ``rules``: the model that says how the input
    arrives, when not ``model`` (the elements a plan moves, priced at one
    each); ``room``: the target's :func:`cost.tables.tp_room` where the run overlaps
    tensor parallelism, under which the all-gather of an input it holds
    replicated over ``q`` devices runs in ``q`` pieces, forward, and its
    gradient's way back, backward (half the re-distribution each; with
    ``fp8``, a byte forward against the precision's backward).

    The cost depends on a configuration only through the tensor's split, and
    many configurations split it alike: it is worked out once per pair of
    distinct splits, then spread to the configurations (the same numbers)."""
    t_src, t_tgt = src.outputs[out], tgt.kind.arriving(tgt, inp, model if rules is None else rules)
    T = np.asarray(t_src.shape, dtype=float)
    C_src, C_tgt = extents(src, src_configs)[1], extents(tgt, tgt_configs)[1]
    S = tensor_splits(t_src, C_src)  # (K_src, r)
    Q = tensor_splits(t_tgt, C_tgt)  # (K_tgt, r)
    net = model.cluster
    if net.two_level:  # with the nodes over which each axis's pieces spread
        S = np.concatenate([S, net.tensor_nodes(t_src, C_src)], axis=1)  # (K_src, 2r)
        Q = np.concatenate([Q, net.tensor_nodes(t_tgt, C_tgt)], axis=1)  # (K_tgt, 2r)
    spread = len(S) * len(Q) >= _SPREAD
    if spread:
        (S, s_of), (Q, q_of) = _distinct_rows(S), _distinct_rows(Q)  # (r_src, .), (K_src,); (r_tgt, .), (K_tgt,)
    r = len(T)
    ps, pt = np.prod(S[:, :r], axis=1), np.prod(Q[:, :r], axis=1)  # (r_src,), (r_tgt,)
    words = need((T / S[:, :r])[:, None, :], (T / Q[:, :r])[None, :, :], ps[:, None], pt[None, :])  # (r_src, r_tgt)
    scale = (1.0 + 1.0 / float(net.word_bytes)) / 2.0 if fp8 else 1.0  # a byte forward, the precision's backward
    words = words * scale
    if not net.two_level:
        cost = net.redistribute(2.0 * words, times=2)
    else:  # the same "area needed" between nodes: the words a target node lacks, shared by its devices
        NS, NQ = S[:, r:], Q[:, r:]
        node_need = need((T / NS)[:, None, :], (T / NQ)[None, :, :], np.prod(NS, axis=1)[:, None],
                         np.prod(NQ, axis=1)[None, :]) * scale  # (r_src, r_tgt)
        share = np.prod(NQ, axis=1) / pt  # (r_tgt,) a device's part of its node's block
        cost = net.redistribute(2.0 * words, 2.0 * np.minimum(node_need * share[None, :], words), times=2)
    cost = np.take(np.take(cost, s_of, axis=0), q_of, axis=1) if spread else cost  # (K_src, K_tgt)
    if room is not None:  # pipelined under the target's products, forward and backward
        held = set("".join(t_tgt.axes))
        q = np.broadcast_to(overlap_pieces(C_tgt, "".join(c for c in tgt.dims if c not in held), net),
                            (len(tgt_configs),))[None, :]  # (1, K_tgt): the devices that hold it alike
        forward = 1.0 / (1.0 + float(net.word_bytes)) if fp8 else 0.5  # a byte forward, b backward
        cost = (pipelined(cost * forward, room[0][None, :], q)
                + pipelined(cost * (1.0 - forward), room[1][None, :], q))
    return cost


_SPREAD = 1 << 16  # edge matrices at least this large are worked out per distinct split


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``a`` and, for each row, which one it is."""
    if a.shape[1] == 0:
        return a[:1], np.zeros(len(a), dtype=np.intp)
    rows, of = np.unique(a, axis=0, return_inverse=True)
    return rows, of.reshape(-1)
