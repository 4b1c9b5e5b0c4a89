"""Derive grader/rubric/ncu_metrics.txt.gz (the metric names the rubric may use) from the ncu captures.

    python tools/ncu_metric_list.py            # rewrite the list from tests/fixtures/ncu/
    python tools/ncu_metric_list.py --check    # exit 1 when the shipped list differs from the captures

The captures (gzip -9n of ncu's own output, on a machine with Nsight Compute) are:

    ncu --version                                  > ncu<V>_version.txt
    ncu --list-chips                               > ncu<V>_list_chips.txt
    ncu --query-metrics --chip C                   > ncu<V>_query_metrics_C.txt     (one per chip)
    ncu --query-metrics --chip gh100 --query-metrics-mode suffix \\
        --metrics dram__bytes_read,sm__inst_executed_pipe_fma   > ncu<V>_query_metrics_suffix_sample_gh100.txt

and the raw pages ncu2025.3.1_raw_*.csv (a grading's own ncu run), whose header names the launch
statistics and device attributes ncu reports itself. To follow a new ncu or add a chip: capture
the files with the new version in their names, delete the old ones, run this script, commit both.
"""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.rubric import metric_names  # noqa: E402
from grader.rubric.ncu_list import parse_query_metrics, parse_version, raw_page_metrics  # noqa: E402

CAPTURES = ROOT / "tests" / "fixtures" / "ncu"


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def derive(captures: Path = CAPTURES) -> str:
    """The data file's text, from the captures in ``captures``."""
    versions = sorted(captures.glob("ncu*_version.txt.gz"))
    if len(versions) != 1:
        raise SystemExit(f"expected one ncu*_version.txt.gz in {captures}, found {len(versions)}")
    tables = [parse_query_metrics(_text(p)) for p in sorted(captures.glob("ncu*_query_metrics_*.txt.gz"))
              if "_suffix_sample_" not in p.name]
    attributes = [m for p in sorted(captures.glob("ncu*_raw_*.csv")) for m in raw_page_metrics(_text(p))
                  if "." not in m]
    return metric_names.render(parse_version(_text(versions[0])), tables, attributes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the shipped list is stale")
    args = ap.parse_args(argv)
    text = derive()
    current = gzip.decompress(metric_names.DATA.read_bytes()).decode() if metric_names.DATA.is_file() else None
    if args.check:
        if current != text:
            print(f"{metric_names.DATA} differs from the captures in {CAPTURES}; run python tools/ncu_metric_list.py",
                  file=sys.stderr)
            return 1
        print(f"{metric_names.DATA}: matches the captures")
        return 0
    metric_names.DATA.write_bytes(gzip.compress(text.encode("utf-8"), 9, mtime=0))
    print(f"wrote {metric_names.DATA}: {text.count(chr(10)) - 3} names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
