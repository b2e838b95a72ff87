"""Matrix products (Gemm, MatMul, Einsum) and embedding lookups (Gather of rows of a weight)."""

from __future__ import annotations

import numpy as np

from models.onnx.values import Act, Unsupported, Val, _axis, _broadcast, _fresh, _ints


class Products:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def _Gemm(self, a, name, ins):
        from kinds.gemm import FC

        x, w = ins[0], ins[1]
        c = ins[2] if len(ins) > 2 and ins[2] is not None else None
        ta, tb = a.get("transA", 0), a.get("transB", 0)
        if isinstance(w, Val) and not w.data and not ta and (c is None or isinstance(c, Val) and not c.data):
            (out,) = self.add(name, FC(w.shape[0] if tb else w.shape[1], bias=c is not None), self.ref(x),
                              weights=[(1, w.key)])
            return [Act(out)]
        y = self.matmul(name, x, w, ta, tb)
        if c is None:
            return [y]
        return [self.arithmetic("Add", f"{name}/bias", [y, c])]

    def _MatMul(self, a, name, ins):
        from kinds.gemm import FC

        x, w = ins
        if len(x.shape) < 2 or len(w.shape) < 2:
            raise Unsupported("of a vector")
        if isinstance(w, Val) and not w.data and len(w.shape) == 2:
            (out,) = self.add(name, FC(w.shape[1]), self.ref(x), weights=[(1, w.key)])
            return [Act(out)]
        return [self.matmul(name, x, w)]

    def matmul(self, name, x, y, tx=0, ty=0) -> Act:
        """``x @ y`` (each transposed when asked) as an Einsum, the batch
        axes broadcast (a size-1 axis against a longer one is squeezed);
        letters follow the operands' where they can."""
        rx, ry = len(x.shape), len(y.shape)
        lx, ly = self.ref(x).letters, self.ref(y).letters
        mx, kx = (rx - 1, rx - 2) if tx else (rx - 2, rx - 1)
        ky, ny = (ry - 1, ry - 2) if ty else (ry - 2, ry - 1)
        if x.shape[kx] != y.shape[ky]:
            raise Unsupported("of shapes that do not match")
        bx, by = x.shape[:rx - 2], y.shape[:ry - 2]
        batch = _broadcast(bx, by)
        sx, sy, used, out = [""] * rx, [""] * ry, set(), []

        def take(*wanted):
            c = next((c for c in wanted if c and c not in used), None) or _fresh(used | {"b", "v"})
            used.add(c)
            return c

        for j, size in enumerate(batch):
            mine = [(j - len(batch) + len(bx), bx, lx, sx), (j - len(batch) + len(by), by, ly, sy)]
            c = take(*[lt[i] for i, shp, lt, _ in mine if i >= 0 and shp[i] == size])
            out.append(c)
            for i, shp, _, s in mine:
                if i >= 0:
                    s[i] = c if shp[i] == size else take()
        sx[mx] = take(lx[mx])
        sx[kx] = sy[ky] = take(lx[kx], ly[ky])
        sy[ny] = take(ly[ny])
        equation = f"{''.join(sx)},{''.join(sy)}->{''.join(out + [sx[mx], sy[ny]])}"
        return self.einsum(name, equation, x, y)

    def einsum(self, name, equation, x, y) -> Act:
        from kinds.gemm import Einsum

        weights = [(i, h.key) for i, h in enumerate((x, y)) if isinstance(h, Val) and not h.data]
        (out,) = self.add(name, Einsum(equation), self.ref(x), self.ref(y), weights=weights)
        return Act(out)

    def _Einsum(self, a, name, ins):
        if len(ins) != 2:
            raise Unsupported(f"of {len(ins)} operands (only 2)")
        eq = a["equation"].replace(" ", "")
        lhs, arrow, rhs = eq.partition("->")
        subs = lhs.split(",")
        if "..." in eq:  # name the broadcast axes with placeholders
            width = max(len(h.shape) - (len(s) - 3) for h, s in zip(ins, subs) if "..." in s)
            dots = [chr(0x100 + i) for i in range(width)]
            subs = [s.replace("...", "".join(dots[width - (len(h.shape) - len(s) + 3):])) for h, s in zip(ins, subs)]
            rhs = rhs.replace("...", "".join(dots))
        if not arrow:  # numpy's implicit output: broadcast axes, then the letters seen once, sorted
            seen = "".join(subs)
            rhs = "".join(sorted({c for c in seen if c >= chr(0x100)})) + \
                "".join(sorted(c for c in set(seen) if c < chr(0x100) and seen.count(c) == 1))
        rename = {}
        for h, s in zip(ins, subs):
            if len(s) != len(h.shape):
                raise Unsupported("whose subscripts do not match its operands")
            letters = self.ref(h).letters
            if "b" in letters:
                rename.setdefault(s[letters.index("b")], "b")
        used = set(rename.values())
        for c in "".join(subs) + rhs:
            if c not in rename:
                rename[c] = _fresh(used | {"b", "v"})
                used.add(rename[c])
        new = ",".join("".join(rename[c] for c in s) for s in subs) + "->" + "".join(rename[c] for c in rhs)
        return [self.einsum(name, new, *ins)]

    def position_rows(self, a, ins) -> bool:
        """Whether a Gather reads rows ``i, i + 1, ...`` of a weight (an
        initializer of two axes) at indices ``(1, s)`` that do not depend
        on the input: a learned position embedding read at the positions of
        one sample, broadcast over the batch."""
        if len(ins) != 2 or not all(isinstance(h, Val) and not h.data and h.tests is None for h in ins):
            return False
        table, ids = ins
        if table.key not in self.initializers or len(table.shape) != 2 or _axis(a.get("axis", 0), 2) != 0:
            return False
        if not ids.known() or len(ids.shape) != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
            return False
        index = np.asarray(ids.value).reshape(-1)
        rows = np.arange(index[0], index[0] + len(index)) if np.issubdtype(index.dtype, np.integer) else None
        return rows is not None and np.array_equal(index, rows)

    def positions(self, name, table, ids):
        """The position embedding of :meth:`position_rows`: an Embedding of
        the table read at the positions of every sample, as the built-in
        decoders read their position tables."""
        from graph import Ref
        from kinds.gemm import Embedding

        r = Ref(None, 0, (self.batch, ids.shape[1]), "bs", "data")
        (out,) = self.add(name, Embedding(table.shape[0], table.shape[1], _fresh({"b", "s", "v"})), r,
                          weights=[(1, table.key)])
        return [Act(out)]

    def _Gather(self, a, name, ins):
        from kinds.gemm import Embedding

        table, ids = ins
        axis = a.get("axis", 0)
        if isinstance(table, Val) and not table.data:
            if len(table.shape) != 2 or _axis(axis, 2) != 0 or isinstance(ids, Val) and not ids.data:
                raise Unsupported("of a weight that is not an embedding table")
            r = self.ref(ids)
            letter = _fresh(set(r.letters) | {"b", "v"})
            (out,) = self.add(name, Embedding(table.shape[0], table.shape[1], letter), r, weights=[(1, table.key)])
            return [Act(out)]
        if isinstance(table, Act) and isinstance(ids, Val) and ids.known():
            axis = _axis(axis, len(table.shape))
            size = table.shape[axis]
            index = [i + size if i < 0 else i for i in _ints(ids.value)]
            if not index or index != list(range(index[0], index[0] + len(index))):
                raise Unsupported("of indices that are not one range")
            piece = self.slice(name, table, axis, index[0], index[0] + len(index))
            if np.ndim(ids.value) == 0:  # a scalar index drops the axis
                return [self.reshape(f"{name}/squeeze", piece, piece.shape[:axis] + piece.shape[axis + 1:])]
            return [piece]
        raise Unsupported("with computed indices")
