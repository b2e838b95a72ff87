"""kinds/: the registry, and hand-worked costs of the kinds beyond the five
built-in networks (grouped and depthwise convolution, RMS normalisation,
transpose, split, broadcasting elementwise; the kinds of language models'
attention and experts are in test_kinds_llm.py) and of the
attributes the built-in networks do not use (asymmetric padding, a
normalisation's activation, the classes on another axis, kept dimensions,
an einsum's bias and unsplit letters).  The kinds the built-in networks use
are checked against the reference numbers in test_cost_model.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cluster import Cluster
from conftest import GRAPH_NAMES, built
from config_space import configurations
from cost_model import CostModel, build_costs, edge_costs, op_cost_parts
from dp_search import search
from graph import GraphBuilder, operators
from kinds import KINDS, Kind, register
from kinds.attention import FusedAttention
from kinds.conv import Conv, Pooling
from kinds.gemm import FC, Einsum
from kinds.pointwise import Dropout, Elementwise, Norm, ReduceMean, RMSNorm, SoftmaxCrossEntropy
from kinds.shape import Concat, Split, Transpose

W = 5000.0
MODEL = CostModel()


def single(kind, *shapes, letters=None):
    """The operator ``kind`` builds from data inputs of ``shapes``."""
    B = GraphBuilder("t", cutoff=1)
    letters = letters or ["bchw"[: len(s)] if len(s) <= 4 else "bcdef"[: len(s)] for s in shapes]
    B.add("op", kind, *[B.data(s, ls) for s, ls in zip(shapes, letters)])
    return operators(B.graph)[0]


def cost(op, cfg, model=MODEL):
    comp, comm = op_cost_parts(op, [cfg], model)
    return float(comp[0]), float(comm[0])


def AR(w, q):
    return W * w / q * 2 * (q - 1)


HAND_WORKED = {"Conv", "RMSNorm", "Transpose", "Split", "Elementwise", "TopKGating", "FusedAttention", "Dropout",
               "Dispatch", "Combine", "Expand", "RMSNormOver"}  # the last five in test_kinds_llm.py


def test_every_kind_is_checked_somewhere():
    """A kind is either used by a built-in network (and so checked against
    the reference numbers) or has a hand-worked test here."""
    used = {op.kind.name for g in GRAPH_NAMES for op in operators(built(g))}
    assert set(KINDS) <= used | HAND_WORKED, set(KINDS) - used - HAND_WORKED
    assert all(issubclass(k, Kind) and k.__name__ == name for name, k in KINDS.items())


def test_register_refuses_a_second_kind_of_the_same_name():
    class Conv(Kind):  # noqa: F811 - deliberately the name of an existing kind
        pass

    with pytest.raises(ValueError, match="two operator kinds are named Conv"):
        register(Conv)
    with pytest.raises(TypeError, match="is not a Kind"):
        register(int)


class TestGroupedConv:
    # input (8, 16, 10, 10), 32 filters 3x3 pad 1 in 4 groups: per group 4 in, 8 out channels
    op = single(Conv(32, 3, pad=1, groups=4), (8, 16, 10, 10))

    def test_space_and_tensors(self):
        assert self.op.dims == "bgchwrsn" and self.op.space == (8, 4, 4, 10, 10, 3, 3, 8)
        image, weight = self.op.inputs
        assert image.axes == ("b", "gc", "h", "w") and weight.shape == (32, 4, 3, 3)
        assert weight.axes == ("gn", "c", "r", "s") and weight.role == "weight"
        assert self.op.outputs[0].shape == (8, 32, 10, 10) and self.op.outputs[0].axes == ("b", "gn", "h", "w")

    def test_cost_by_hand(self):
        # b split 2, g split 2, n split 2: each of bb = 2 groups is a GEMM of
        # mm = 8*10*10/2 = 400, nn = 8/2 = 4, kk = 4*3*3 = 36; no halo (h, w whole)
        comp, comm = cost(self.op, (2, 2, 1, 1, 1, 1, 1, 2))
        assert comp == pytest.approx(2 * 3 * 400 * 4 * 36, rel=1e-12)
        assert comm == pytest.approx(2 * (AR(400 * 36, 2) + AR(4 * 36, 2)), rel=1e-12)

    def test_split_input_channels_reduce_partial_sums(self):
        # c split 2 within each group: kk = 4*3*3/2; each of the 4 groups all-reduces its
        # partial outputs mm*nn = 800*8 over the 2 devices (h, w are never split: no halo)
        comp, comm = cost(self.op, (1, 1, 2, 1, 1, 1, 1, 1))
        assert comp == pytest.approx(4 * 3 * 800 * 8 * 18, rel=1e-12)
        assert comm == pytest.approx(4 * AR(800 * 8, 2), rel=1e-12)

    def test_depthwise(self):
        op = single(Conv(16, 3, groups=16, pw=1), (8, 16, 10, 10))
        assert op.space == (8, 16, 1, 8, 8, 3, 3, 1)
        comp, comm = cost(op, (4, 4, 1, 1, 1, 1, 1, 1))
        # bb = 16/4 groups per device; mm = 8*8*8/4 = 128, nn = 1, kk = 9; weights shared by 4 batch splits
        assert comp == pytest.approx(4 * (3 * 128 * 1 * 9 + 3 * 1 * 128 * 1), rel=1e-12)
        assert comm == pytest.approx(4 * AR(1 * 9, 4), rel=1e-12)

    def test_groups_must_divide_the_channels(self):
        with pytest.raises(ValueError, match="3 groups do not divide 16 input and 32 output channels"):
            single(Conv(32, 3, groups=3), (8, 16, 10, 10))


def test_rms_norm_by_hand():
    op = single(RMSNorm(-1), (4, 6, 8), letters=["bse"])
    assert op.dims == "bse" and [t.shape for t in op.inputs] == [(4, 6, 8), (8,)]
    comp, comm = cost(op, (2, 1, 4))
    e, da = 2 * 6 * 2, 8 / 4
    assert comp == pytest.approx(8 * e, rel=1e-12)
    assert comm == pytest.approx(2 * AR(e / da, 4) + 2 * AR(da, 2), rel=1e-12)


class TestTranspose:
    op = single(Transpose((0, 2, 1, 3)), (8, 12, 16, 4), letters=["bshd"])

    def test_output_keeps_the_split_of_each_axis(self):
        assert self.op.outputs[0].shape == (8, 16, 12, 4) and self.op.outputs[0].axes == ("b", "h", "s", "d")
        assert cost(self.op, (2, 3, 4, 1)) == (0.0, 0.0)

    def test_a_transposed_tensor_read_with_the_same_split_moves_nothing(self):
        B = GraphBuilder("t", cutoff=1)
        x = B.data((8, 12, 16, 4), "bshd")
        y = B.add("t", Transpose((0, 2, 1, 3)), x)
        B.add("n", RMSNorm(-1), y)
        t, n = operators(B.graph)
        assert n.dims == "bhsd"
        m = edge_costs(t, 0, n, 0, [(2, 3, 4, 1)], [(2, 4, 3, 1), (2, 3, 4, 1)], MODEL)
        assert m[0, 0] == 0.0  # same split of each axis
        # read split the other way: a device needs its (4, 4, 4, 4) block, holds a (4, 4, 4, 4) one;
        # P(Q) = P(S) so the overlap counts: 4*3*4*4 ... the spec's "area needed"
        a, b = np.array([4, 4, 4, 4.0]), np.array([4, 16 / 3, 3, 4.0])
        assert m[0, 1] == pytest.approx(W * 2 * max(b.prod() - np.minimum(a, b).prod(), 0), rel=1e-12)

    def test_not_a_permutation(self):
        with pytest.raises(ValueError, match=r"\(0, 0, 1, 2\) is not a permutation"):
            single(Transpose((0, 0, 1, 2)), (8, 12, 16, 4))


class TestSplit:
    op = single(Split(1, (4, 12)), (8, 16, 5))

    def test_pieces_and_the_unsplit_axis(self):
        assert self.op.space == (8, 1, 5) and [t.shape for t in self.op.outputs] == [(8, 4, 5), (8, 12, 5)]
        assert self.op.never_split == "c"
        assert {tuple(c)[1] for c in configurations(self.op, 8, 1).tolist()} == {1}
        assert cost(self.op, (2, 1, 5)) == (0.0, 0.0)

    def test_split_and_concat_in_a_searched_graph(self):
        B = GraphBuilder("t", cutoff=1, batch=8)
        x = B.data((8, 16), "bk")
        a, b = B.add("split", Split(1, (4, 12)), x)
        a = B.add("fa", FC(8), a)
        b = B.add("fb", FC(8), b)
        y = B.add("cat", Concat(1), a, b)
        B.add("loss", SoftmaxCrossEntropy(), y)
        r = search(build_costs(B.graph, 4), 0)
        assert r.cost > 0 and len(r.strategy) == 5

    def test_pieces_must_add_up(self):
        with pytest.raises(ValueError, match=r"pieces \(4, 4\) do not split axis 1"):
            single(Split(1, (4, 4)), (8, 16))


class TestBroadcastElementwise:
    op = single(Elementwise(keeps_inputs=True), (8, 16, 6, 6), (8, 16, 1, 1))

    def test_size_one_axes_are_never_split(self):
        assert self.op.inputs[1].axes == ("b", "c", "", "")
        comp, comm = cost(self.op, (2, 4, 3, 1))
        assert comp == 8 / 2 * 16 / 4 * 6 / 3 * 6 and comm == 0.0

    def test_cannot_broadcast(self):
        with pytest.raises(ValueError, match="cannot broadcast"):
            single(Elementwise(), (8, 16, 6, 6), (8, 3, 1, 1))


def test_communication_scales_with_the_cluster():
    op = single(RMSNorm(-1), (4, 6, 8), letters=["bse"])
    slow = CostModel(Cluster(10, 1.6))  # W ten times larger
    assert cost(op, (2, 1, 4), slow)[1] == pytest.approx(10 * cost(op, (2, 1, 4))[1], rel=1e-12)
    assert math.isclose(cost(op, (2, 1, 4), slow)[0], cost(op, (2, 1, 4))[0])


class TestAsymmetricPadding:
    def test_pads_that_differ_per_side(self):
        # (top, left, bottom, right) = (0, 0, 1, 1): 13 + 1 - 3 = 11, 11 // 2 + 1 = 6
        op = single(Pooling(3, stride=2, pad=(0, 0, 1, 1)), (8, 16, 13, 13))
        assert op.kind.pad == (0, 0, 1, 1) and op.outputs[0].shape == (8, 16, 6, 6)
        assert single(Pooling(3, stride=2, pad=(1, 2, 1, 2)), (8, 16, 13, 13)).kind.pad == (1, 2)

    def test_the_cost_does_not_depend_on_padding(self):
        # the halo exchange and the count depend on the window and the output only
        a = single(Conv(8, 3, pad=(1, 1, 1, 1)), (8, 4, 10, 10))
        b = single(Conv(8, 3, pad=1), (8, 4, 10, 10))
        assert a == b and cost(a, (2, 2, 1, 1, 1, 1, 2)) == cost(b, (2, 2, 1, 1, 1, 1, 2))


def test_a_normalisation_with_an_activation():
    op = single(Norm(axis=0, param_axis=1, pw=2), (8, 4, 6, 6))
    comp, comm = cost(op, (2, 2, 1, 1))
    e, da = 4 * 2 * 36, 8 / 2
    assert comp == pytest.approx((16 + 2) * e, rel=1e-12)
    assert comm == pytest.approx(4 * AR(e / da, 2) + 4 * AR(da, 2), rel=1e-12)
    rms = single(RMSNorm(-1, pw=1), (4, 6, 8), letters=["bse"])
    assert cost(rms, (2, 1, 1))[0] == pytest.approx(9 * 2 * 6 * 8, rel=1e-12)


def test_softmax_cross_entropy_over_channels():
    """An NCHW classifier's (b, classes, 1, 1): the classes are axis 1."""
    op = single(SoftmaxCrossEntropy(axis=1), (8, 10, 1, 1))
    assert op.kind.model_dims(op) == "c"
    comp, comm = cost(op, (2, 5, 1, 1))
    e, bs = 4 * 2, 4  # per device: 4 samples x 2 classes; 4 samples
    assert comp == 4 * e + 2 * bs and comm == W * 2 * bs
    assert single(SoftmaxCrossEntropy(axis=1), (8, 10)) == single(SoftmaxCrossEntropy(), (8, 10))


def test_reduce_mean_keeping_dimensions():
    op = single(ReduceMean((2, 3), keepdims=True), (8, 16, 6, 6))
    out = op.outputs[0]
    assert out.shape == (8, 16, 1, 1) and out.axes == ("b", "c", "", "")
    comp, comm = cost(op, (2, 2, 3, 1))
    assert comp == 0 and comm == pytest.approx(AR(4 * 8 * 2 * 6, 3), rel=1e-12)


class TestEinsumAttributes:
    def test_bias_over_the_n_letters(self):
        op = single(Einsum("bse,cehd->cbhsd", bias=True), (4, 6, 8), (3, 8, 2, 5), letters=["bse", "cehd"])
        assert [(t.shape, t.axes) for t in op.inputs[2:]] == [((3, 2, 5), ("c", "h", "d"))]
        # the bias is free: the GEMM's cost, M = b s, N = c h d, K = e; b split 2 (dims cbhsde)
        assert op.dims == "cbhsde"
        comp, comm = cost(op, (1, 2, 1, 1, 1, 1))
        mm, nn, kk = 4 * 6 / 2, 3 * 2 * 5, 8
        assert comp == pytest.approx(3 * mm * nn * kk, rel=1e-12)
        assert comm == pytest.approx(AR(nn * kk, 2), rel=1e-12)  # the weight gradient, over the b split

    def test_unsplit_letters_are_never_split(self):
        op = single(Einsum("bhd,bdt->bht", unsplit="d"), (4, 2, 8), (4, 8, 6), letters=["bhd", "bdt"])
        assert op.never_split == "d"
        assert set(configurations(op, 8, 1)[:, op.dims.index("d")].tolist()) == {1}
        with pytest.raises(ValueError, match="unsplit letters 'z'"):
            single(Einsum("bhd,bdt->bht", unsplit="z"), (4, 2, 8), (4, 8, 6), letters=["bhd", "bdt"])


    def test_a_size_one_letter_of_one_operand_is_squeezed(self):
        # grouped-query attention's key (b, g, 1, t, d) read by queries (b, g, r, s, d)
        op = single(Einsum("bgrsd,bgutd->bgrst", unsplit="d"), (4, 2, 3, 5, 8), (4, 2, 1, 6, 8),
                    letters=["bgrsd", "bgutd"])
        assert op.dims == "bgrstdu" and op.space == (4, 2, 3, 5, 6, 8, 1)
        # batch b g, M = r s, N = t, K = d; b split 2, t split 3
        comp, comm = cost(op, (2, 1, 1, 1, 3, 1, 1))
        bb, mm, nn, kk = 2 * 2, 3 * 5, 6 / 3, 8
        assert comp == pytest.approx(bb * 3 * mm * nn * kk, rel=1e-12)
        assert comm == pytest.approx(bb * AR(mm * kk, 3), rel=1e-12)
        with pytest.raises(ValueError, match="'u' is in one operand only .* must have size 1, not 2"):
            single(Einsum("bgrsd,bgutd->bgrst"), (4, 2, 3, 5, 8), (4, 2, 2, 6, 8), letters=["bgrsd", "bgutd"])


class TestDropout:
    """A dropout of (8, 16, 10): e = 1280 elements."""

    op = single(Dropout(0.1), (8, 16, 10), letters=["bsh"])

    def test_cost_by_hand(self):
        assert cost(self.op, (1, 1, 1)) == (2 * 1280, 0.0)
        assert cost(self.op, (2, 4, 1)) == (2 * 1280 / 8, 0.0)

    def test_it_keeps_a_mask_of_one_byte_per_element(self):
        from cost_model import footprint
        from kinds.base import Extents

        model = CostModel(Cluster(precision="bf16"))
        C = Extents(self.op.dims, np.array([[2, 1, 1], [1, 1, 1]], dtype=float))
        assert list(footprint(self.op, C, model).activations) == [640.0, 1280.0]

    def test_a_probability_outside_0_1_is_refused(self):
        from errors import InputError

        with pytest.raises(InputError, match="between 0 and 1, got 1.5"):
            single(Dropout(1.5), (8, 16))


class TestFusedAttention:
    """q, k, v of (b=2, h=4, s=8, d=16): E = b h s t = 512 score elements."""

    def op(self, causal=False, kv_heads=4):
        kv = (2, kv_heads, 8, 16)
        return single(FusedAttention(causal=causal), (2, 4, 8, 16), kv, kv, letters=["bhsd", "bhsd", "bhsd"])

    def test_space_and_tensors(self):
        op = self.op()
        assert op.dims == "bhsdt" and op.space == (2, 4, 8, 16, 8) and op.never_split == "dt"
        assert op.inputs[1].axes == ("b", "h", "t", "d") and op.outputs[0].axes == ("b", "h", "s", "d")

    def test_cost_by_hand(self):
        E, d = 512, 16
        assert cost(self.op(), (1, 1, 1, 1, 1)) == (7 * E * d + 13 * E, 0.0)
        assert cost(self.op(), (2, 2, 1, 1, 1)) == ((7 * E * d + 13 * E) / 4, 0.0)  # nothing to communicate
        from cost_model import op_work

        w = op_work(self.op(), [(1, 1, 2, 1, 1)], MODEL)
        assert w.macs[0] == 2 * E * d / 2 and w.backward_macs[0] == 2.5 * w.macs[0] and w.kernel == "attention"
        assert w.forward[0] == (2 * E * d + 5 * E) / 2

    def test_a_causal_mask_leaves_a_bit_more_than_half(self):
        E, d = 512 * 9 / 16, 16  # (t + 1) / (2 t) of the scores
        assert cost(self.op(causal=True), (1, 1, 1, 1, 1))[0] == pytest.approx(7 * E * d + 13 * E, rel=1e-15)

    def test_it_keeps_q_k_v_the_output_and_a_statistic_per_row(self):
        from cost_model import op_memory

        _, acts = op_memory(self.op(), [(2, 1, 1, 1, 1)])
        assert acts[0] == (4 * 2 * 4 * 8 * 16 + 2 * 4 * 8) / 2

    def test_grouped_query_attention_broadcasts_a_group_s_key(self):
        B = GraphBuilder("t", cutoff=1)
        q = B.data((2, 2, 4, 8, 16), "bgrsd")  # 2 groups of 4 query heads
        kv = B.data((2, 2, 1, 8, 16), "bgusd")
        B.add("op", FusedAttention(), q, kv, kv)
        op = operators(B.graph)[0]
        assert op.inputs[1].axes == ("b", "g", "", "t", "d")
        with pytest.raises(ValueError, match="key/value axis 1 of size 3 against 2"):
            B.add("bad", FusedAttention(), q, B.data((2, 3, 1, 8, 16), "bgusd"), B.data((2, 3, 1, 8, 16), "bgusd"))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_need_is_the_area_needed_for_every_pair_and_for_one(dtype):
    """``kinds.need``, worked out in place over every pair of splits, is the
    spec's area needed pair by pair (``prod(tgt) - (0 if P(Q) > P(S) else
    prod(min(src, tgt)))``, at least 0), in the extents' precision, and a
    number for one pair of extents."""
    from kinds import need

    rng = np.random.default_rng(7)
    for r in (1, 2, 3, 5):
        src = rng.choice([1, 2, 4, 8, 16], size=(6, r)).astype(dtype)
        tgt = rng.choice([1, 2, 4, 8, 16], size=(4, r)).astype(dtype)
        ps, pt = rng.choice([1, 2, 4, 8], size=6).astype(float), rng.choice([1, 2, 4, 8], size=4).astype(float)
        got = need(src[:, None, :], tgt[None, :, :], ps[:, None], pt[None, :])
        assert got.shape == (6, 4) and got.dtype == np.result_type(dtype, np.float16)
        for i in range(6):
            for j in range(4):
                lack = math.prod(tgt[j].tolist()) - (0 if pt[j] > ps[i] else
                                                     math.prod(np.minimum(src[i], tgt[j]).tolist()))
                assert got[i, j] == max(lack, 0)
                one = need(src[i], tgt[j], ps[i], pt[j])
                assert np.ndim(one) == 0 and one == got[i, j]
    # counts broadcast wider than the extents: one overlap, several comparisons
    wide = need(np.array([[4.0, 4.0]]), np.array([[2.0, 8.0]]), np.array([[1.0], [4.0]]), 2.0)
    assert wide.tolist() == [[16.0], [8.0]]
