"""One table printer for the benchmark scripts: aligned text or Markdown."""

from __future__ import annotations


def render(head: list[str], rows: list[list[str]], markdown: bool = False, left: int = 1) -> str:
    """``head`` and ``rows`` of cells as a Markdown table, or as aligned text
    with the first ``left`` columns left-aligned and the others right-aligned."""
    if markdown:
        rule = "|" + "".join("---|" if i < left else "---:|" for i in range(len(head)))
        return "\n".join(["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [head] + rows)
