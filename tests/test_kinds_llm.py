"""The kinds language models' newer structure needs, worked by hand: top-k
routing, the all-to-all dispatch and combine of a mixture of experts (on
one network and on two levels), attention over a sliding window or chunks
(their share of the scores and their halo under context parallelism),
attention sinks, values of their own width, a broadcast axis and a norm
over several axes."""

from __future__ import annotations

import numpy as np
import pytest

from cluster import Cluster
from cost_model import CostModel, op_memory, op_work
from errors import InputError
from graph import GraphBuilder, operators
from kinds.attention import FusedAttention
from kinds.base import Extents
from kinds.moe import Combine, Dispatch, TopKGating
from kinds.pointwise import RMSNormOver
from kinds.shape import Expand
from test_kinds import AR, MODEL, W, cost, single  # the same hand-worked setting

class TestTopKGating:
    # logits (b, s, o) = (4, 6, 8): top-2 of 8 experts
    op = single(TopKGating(2), (4, 6, 8), letters=["bso"])

    def test_space_and_tensors(self):
        assert self.op.dims == "bso" and self.op.space == (4, 6, 8)
        assert self.op.outputs[0].shape == (4, 6, 2) and self.op.outputs[0].axes == ("b", "s", "")

    def test_cost_by_hand(self):
        comp, comm = cost(self.op, (2, 1, 4))  # 2 x 6 tokens, 2 of the 8 logits each
        e, tokens = 2 * 6 * 2, 2 * 6
        assert comp == pytest.approx(4 * e + e * 8 + 2 * e, rel=1e-12)
        assert comm == pytest.approx(2 * AR(tokens, 4) + AR(tokens * 8, 4), rel=1e-12)
        assert cost(self.op, (2, 3, 1))[1] == 0  # the experts whole: no reduction
        grouped = single(TopKGating(2, groups=4), (4, 6, 8), letters=["bso"])
        assert cost(grouped, (2, 1, 4))[0] == pytest.approx(comp + 2 * e, rel=1e-12)

    def test_bad_gating(self):
        with pytest.raises(InputError, match="top-9 of 8 experts"):
            single(TopKGating(9), (4, 6, 8), letters=["bso"])
        with pytest.raises(InputError, match="8 experts in 3 groups"):
            single(TopKGating(2, groups=3), (4, 6, 8), letters=["bso"])


class TestDispatchAndCombine:
    """Tokens (b, s, e) = (4, 6, 10), each to 2 of 8 experts, 2 slots per
    expert and sample."""

    dispatch = single(Dispatch(2, 8, 2), (4, 6, 10), (4, 6, 2), letters=["bse", "bsk"])
    combine = single(Combine(2, 8), (8, 4, 2, 10), (4, 6, 2), letters=["xbse", "bsk"])

    def test_space_and_tensors(self):
        for op in (self.dispatch, self.combine):
            assert op.dims == "xbse" and op.space == (8, 4, 6, 10)
        tokens, routing = self.dispatch.inputs
        assert tokens.axes == ("bx", "s", "e") and routing.axes == ("bx", "s", "")
        assert self.dispatch.outputs[0].shape == (8, 4, 2, 10) and self.dispatch.outputs[0].axes == tuple("xbse")
        assert self.combine.inputs[0].axes == tuple("xbse") and self.combine.outputs[0].axes == ("bx", "s", "e")

    def test_an_all_to_all_over_the_experts_devices(self):
        copies = 2 * 4 * 6 * 10 / 4  # a device's tokens (split 4 ways by b x), each sent to 2 experts
        comp, comm = cost(self.dispatch, (4, 1, 1, 1))
        assert comp == 2 * copies and comm == pytest.approx(2 * W * copies * 3 / 4, rel=1e-12)
        comp, comm = cost(self.combine, (4, 1, 1, 1))
        assert comp == 6 * copies and comm == pytest.approx(2 * W * copies * 3 / 4, rel=1e-12)
        assert cost(self.dispatch, (1, 4, 1, 1))[1] == 0  # every expert on every device: nothing sent

    def test_on_two_levels_each_share_crosses_its_own_link(self):
        net = Cluster(gpus_per_node=2, inter_bw=4.0)  # 4 times dearer between nodes
        copies = 2 * 4 * 6 * 10 / 4
        _, comm = cost(self.dispatch, (4, 1, 1, 1), CostModel(net))  # 2 devices per node, 2 nodes
        assert comm == pytest.approx(2 * (W * copies * 1 / 4 + 4 * W * copies * 2 / 4), rel=1e-12)

    def test_memory_and_traffic(self):
        w = op_work(self.dispatch, [(2, 2, 1, 1)], MODEL)
        tokens = 4 * 6 * 10 / 4
        assert w.moved[0] == tokens + 2 * tokens and w.moved_back[0] == 4 * tokens
        _, acts = op_memory(self.combine, [(2, 2, 1, 1)])
        assert acts[0] == 8 * 4 * 2 * 10 / 4 + 4 * 6 * 2 / 4  # the experts' outputs and the routing

    def test_bad_routing(self):
        with pytest.raises(InputError, match="routing .* is not top-3"):
            single(Dispatch(3, 8, 2), (4, 6, 10), (4, 6, 2), letters=["bse", "bsk"])


class TestWindows:
    """q, k, v of (b=2, h=4, s=8, d=16)."""

    def op(self, **how):
        kv = (2, 4, 8, 16)
        return single(FusedAttention(**how), (2, 4, 8, 16), kv, kv, letters=["bhsd"] * 3)

    def test_a_window_costs_the_pairs_it_leaves(self):
        d = 16
        pairs = 3 * 4 / 2 + 5 * 3  # the first 3 queries see 1, 2, 3 keys, the other 5 see 3
        E = 2 * 4 * pairs
        assert cost(self.op(window=3), (1,) * 5) == pytest.approx((7 * E * d + 13 * E, 0.0), rel=1e-12)
        E = 2 * 4 * 2 * (4 * 5 / 2)  # two chunks of 4
        assert cost(self.op(chunk=4), (1,) * 5)[0] == pytest.approx(7 * E * d + 13 * E, rel=1e-12)

    def test_keys_split_with_the_queries_and_a_halo(self):
        op = self.op(window=3)
        assert op.inputs[1].axes == ("b", "h", "s", "d") and op.never_split == "dt"
        per_position = 2 * (2 * 4 * 16)  # keys and values of a position, every head and sample
        assert cost(op, (1, 1, 2, 1, 1))[1] == pytest.approx(2 * W * 2 * per_position, rel=1e-12)  # 2 keys back
        chunked = self.op(chunk=4)
        assert cost(chunked, (1, 1, 2, 1, 1))[1] == 0  # a device's 4 positions are a chunk
        assert cost(chunked, (1, 1, 4, 1, 1))[1] == pytest.approx(2 * W * 2 * per_position, rel=1e-12)

    def test_full_attention_model_flops_count_the_whole_matrix_a_window_its_pairs(self):
        E, d = 2 * 4 * 8 * 8, 16
        full = self.op(causal=True)
        assert full.kind.model_macs(full, op_work(full, [(1,) * 5], MODEL)) == pytest.approx(3 * 2 * E * d)
        win = self.op(window=3)
        pairs = 2 * 4 * (3 * 4 / 2 + 5 * 3)
        assert win.kind.model_macs(win, op_work(win, [(1,) * 5], MODEL)) == pytest.approx(3 * 2 * pairs * d)
        for long in (self.op(window=8), self.op(window=4096), self.op(chunk=8)):  # they mask nothing more
            assert long.kind.model_macs(long, op_work(long, [(1,) * 5], MODEL)) == pytest.approx(3 * 2 * E * d)

    def test_sinks_values_of_their_own_width_and_soft_capping(self):
        B = GraphBuilder("t", cutoff=1)
        q = B.data((2, 4, 8, 16), "bhsd")
        k, v = B.data((2, 4, 8, 16), "bhsd"), B.data((2, 4, 8, 8), "bhsd")
        B.add("op", FusedAttention(causal=False, softcap=True), q, k, v, B.weight((4,), "h"))
        op = operators(B.graph)[0]
        assert op.outputs[0].shape == (2, 4, 8, 8) and op.inputs[3].axes == ("h",)
        E = 2 * 4 * 8 * 8
        w = op_work(op, [(2, 1, 1, 1, 1)], MODEL)
        assert w.macs[0] == E * (16 + 8) / 2 and w.compute[0] == (3.5 * E * 24 + 13 * E + 6 * E) / 2
        assert cost(op, (2, 1, 1, 1, 1))[1] == pytest.approx(AR(4, 2), rel=1e-12)  # the sinks' gradients
        with pytest.raises(InputError, match="a window of 2 and chunks of 2"):
            self.op(window=2, chunk=2)


def test_expand_adds_a_broadcast_axis():
    op = single(Expand(1, 4, "h"), (2, 8, 4), letters=["bsd"])
    assert op.dims == "bhsd" and op.space == (2, 4, 8, 4) and op.inputs[0].axes == ("b", "s", "d")
    assert op.outputs[0].shape == (2, 4, 8, 4) and cost(op, (2, 2, 1, 1)) == (0.0, 0.0)


def test_a_norm_over_several_axes():
    op = single(RMSNormOver((1, 3)), (2, 4, 8, 16), letters=["bhsd"])
    assert op.inputs[1].shape == (4, 16) and op.inputs[1].axes == ("h", "d")
    e, da = 2 * 2 * 8 * 16, 2 * 16  # heads split 2
    assert cost(op, (1, 2, 1, 1)) == pytest.approx((8 * e, 2 * AR(e / da, 2)), rel=1e-12)
    assert cost(op, (2, 1, 1, 1))[1] == pytest.approx(AR(4 * 16, 2), rel=1e-12)  # the scale's gradient


def test_all_to_all_on_the_cluster():
    C = Extents("xb", np.array([[8.0, 1.0], [1.0, 8.0]]))
    flat = Cluster()
    assert list(flat.alltoall(100.0, C, "x")) == pytest.approx([W * 100 * 7 / 8, 0.0])
    two = Cluster(gpus_per_node=4, inter_bw=2.0)  # 8 times dearer between nodes
    assert list(two.alltoall(100.0, C, "x")) == pytest.approx([W * 100 * 3 / 8 + 8 * W * 100 * 4 / 8, 0.0])
