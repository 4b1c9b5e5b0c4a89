"""Print where a grading's time went: ``python tools/phase_times.py OUT/grading.json [MORE.json ...]``.

Each step of the grading with its seconds and share of the total, and the pieces inside it (each
stage's compile and run, the stage child's own split of a run, racecheck, the occupancy program)
indented under it. With several files, one column per file (before/after tables).

``python tools/phase_times.py --timeline OUT/grading.json``: when each step ran and what each GPU
child did when (started, waited at a gate, got its turn, ended), in seconds from the grading's start:
what waited for what.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.clock import breakdown  # noqa: E402
from grader.grading import GradingFormatError, load_grading  # noqa: E402

Row = tuple[str, str]  # (the step's label, the detail's label or "" for the step itself)


def keyed_rows(rows: list[tuple[str, float, str]]) -> dict[Row, tuple[float, str]]:
    """breakdown()'s rows keyed by (step, detail): a detail belongs to the step it is listed under, so a
    phase that moved to another step (occ.cu's build, now in compile_stages) gets a row of its own
    there. Repeated rows (a detail recorded twice in a step) are added up."""
    out: dict[Row, tuple[float, str]] = {}
    step = ""
    for label, seconds, share in rows:
        if label.startswith("  "):
            key = (step, label)
        else:
            step, key = label, (label, "")
        before = out.get(key, (0.0, share))
        out[key] = (before[0] + seconds, before[1])
    return out


def merged_order(sequences: list[list[Row]]) -> list[Row]:
    """Every row of every column once, each column's rows in their own order (a row new in a later
    column goes right after the row it follows there)."""
    order: list[Row] = []
    for seq in sequences:
        at = 0
        for key in seq:
            if key in order:
                at = order.index(key) + 1
            else:
                order.insert(at, key)
                at += 1
    # a step's details directly under it, whatever column brought them
    steps = [k for k in order if not k[1]]
    return [row for step in steps for row in [step] + [k for k in order if k[1] and k[0] == step[0]]]


def timeline_rows(g) -> list[tuple[str, str]]:
    """(what, when) rows: the steps, then every child of the GPU schedule with its events, in seconds
    from the first step's start."""
    steps = [p for p in g.phases if not p.detail and p.ended]
    if not steps:
        return []
    origin = min(p.ended - p.seconds for p in steps)
    rows = [(f"step {p.name}", f"{p.ended - p.seconds - origin:.2f} - {p.ended - origin:.2f}") for p in steps]
    for party in g.timeline:  # grader/sandbox/turns.py: PartyTimeline
        rows.append((party.party, " · ".join(f"{what} {t - origin:.2f}" for t, what in party.events)))
    return rows


def print_timeline(name: str) -> int:
    try:
        g = load_grading(name)
    except GradingFormatError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    print(f"| {Path(name).parent.name or name} | seconds from the start |")
    print("|---|---|")
    for what, when in timeline_rows(g):
        print(f"| {what} | {when} |")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--timeline"]:
        return max((print_timeline(name) for name in argv[1:]), default=2)
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    columns = []
    cpu: list[str] = []
    own: list[str] = []
    for name in argv:
        try:
            g = load_grading(name)
        except GradingFormatError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 2
        columns.append((name, g.seconds, keyed_rows(breakdown(g.phases, g.seconds))))
        cpu.append("-" if g.cpu_s is None else f"{g.cpu_s:.1f}")
        own.append("-" if g.cpu_self_s is None else f"{g.cpu_self_s:.1f}")
    heads = [Path(n).parent.name or n for n, _, _ in columns]
    print("| phase | " + " | ".join(f"{h} (s)" for h in heads) + " |")
    print("|---|" + "---:|" * len(columns))
    for step, detail in merged_order([list(rows) for _, _, rows in columns]):
        cells = []
        for _, _, rows in columns:
            hit = rows.get((step, detail))
            cells.append("-" if hit is None else f"{hit[0]:.2f}" + (f" ({hit[1]})" if hit[1] else ""))
        label = detail.replace(" ", "&nbsp;", 2) if detail else step
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"**{s:.2f}**" for _, s, _ in columns) + " |")
    if any(c != "-" for c in cpu):
        print("| CPU seconds, every process | " + " | ".join(cpu) + " |")
    if any(c != "-" for c in own):
        print("| CPU seconds, the grading process | " + " | ".join(own) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
