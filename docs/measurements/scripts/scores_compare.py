"""Compare the gradings of 2026-12-07-scores-unchanged.sh: for each NAME with new-NAME and old-NAME folders,
every results.json item's status, score and points, and its message with numbers masked (measured values
differ from run to run). Prints one line per case and each difference."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NUM = re.compile(r"-?\d+(\.\d+)?(e-?\d+)?")


def items(folder: Path) -> dict[str, tuple] | None:
    try:
        res = json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return {t.get("number") or t["name"]: (t.get("status"), t.get("score"), t.get("max_score"),
                                           NUM.sub("#", t.get("output") or "")) for t in res["tests"]}


def main(work: Path) -> int:
    same = 0
    for new in sorted(work.glob("new-*")):
        if not new.is_dir():
            continue
        name = new.name[4:]
        a, b = items(work / f"old-{name}"), items(new)
        if a is None or b is None:
            print(f"{name}: no results.json ({'old' if a is None else 'new'})")
            continue
        diffs = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        score = lambda d: sum(v[1] or 0 for v in d.values())  # noqa: E731
        print(f"{name}: old {score(a):g}, new {score(b):g}, {len(b)} items, {len(diffs)} differ")
        for k in diffs:
            print(f"  {k}:\n    old {a.get(k)}\n    new {b.get(k)}")
        same += not diffs
    print(f"{same} cases item for item the same")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
