"""Writes the demo class of tests/test_similarity.py from the repository's own kernels (run once; the
files it writes are committed). Each planted case is a transformation a copier would make:

- ``planted_copy``: ``honest_solutions``'s kernel with every local name renamed, its comments dropped
  and its indentation changed (a classmate's copy);
- ``reference_copy``: the textbook course ladder's kernel (the ``--against`` reference) with its names
  renamed and a header of its own (a public ladder adapted at the interface only).

The honest ones are independent kernels of the same technique (2D register blocktiling): the course's
solution, the textbook's vectorized one and its warptiling one.
"""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STAGE = "gemm/blocktiling_2d.cu"


def rename(text: str, names: dict[str, str]) -> str:
    return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: names[m.group(1)], text)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"\s*//.*$", "", line) for line in text.splitlines() if not line.strip().startswith("//"))


def reindent(text: str) -> str:
    out = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        out.append("  " * ((len(line) - len(body)) // 4) + body if body else "")
    return "\n".join(re.sub(r"\n{3,}", "\n\n", "\n".join(out)).splitlines()) + "\n"


PLANTED = {"As": "sA", "Bs": "sB", "tid": "t", "warp": "wid", "lane": "ln", "rowT": "r0", "colT": "c0",
           "Ablk": "aBase", "Bblk": "bBase", "pa": "regA", "pb": "regB", "load_global": "fetchTiles",
           "store_shared": "stashTiles", "acc": "sum", "buf": "stage", "fa": "fragA", "fb": "fragB", "as": "pA",
           "bs": "pB", "an": "nA", "bn": "nB", "cur": "now", "nxt": "nextIdx", "idx": "id", "kk": "kr", "c4": "cq",
           "Cblk": "cBase", "more": "hasNext", "A_PAD": "PAD_A", "A_F4": "NA4", "B_F4": "NB4",
           "A_LOADS": "LOADS_A", "B_LOADS": "LOADS_B", "WARPS_M": "WGM", "WARPS_N": "WGN"}
REFERENCE = {"As": "tileA", "Bs": "tileB", "tid": "me", "aRow": "ra", "aCol": "ca", "bRow": "rb", "bCol": "cb",
             "threadRow": "ty", "threadCol": "tx", "rowBase": "by", "colBase": "bx", "acc": "out",
             "regA": "colA", "regB": "rowB", "A_ROWS_PER_PASS": "STEP_A", "B_ROWS_PER_PASS": "STEP_B"}


def main(out: Path = HERE / "class") -> None:
    """Write the class into ``out`` (the committed folder by default; tests/test_similarity.py writes it
    elsewhere and compares)."""
    def write(name: str, text: str) -> None:
        path = out / name / STAGE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    solution = (REPO / "solutions" / STAGE).read_text(encoding="utf-8")
    course = (REPO / "tests/submissions/textbook/course" / STAGE).read_text(encoding="utf-8")
    write("honest_solutions", solution)
    write("honest_vectorized", (REPO / "tests/submissions/textbook/vectorized" / STAGE).read_text(encoding="utf-8"))
    write("honest_warptiling", (REPO / "tests/submissions/textbook/warptiling" / STAGE).read_text(encoding="utf-8"))
    write("planted_copy", "// 2D blocktiling, my own version.\n" + reindent(strip_comments(rename(solution, PLANTED))))
    write("reference_copy", "// Stage 4b: outer-product register tiling.\n"
          + strip_comments(rename(course, REFERENCE)).lstrip() + "\n")


if __name__ == "__main__":
    main()
