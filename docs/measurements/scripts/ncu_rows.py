#!/usr/bin/env python3
"""Print the kernels of one ncu ``--csv --page raw`` output: each kernel's name, then its metrics.

    python3 docs/measurements/scripts/ncu_rows.py NCU_OUTPUT.csv

The file may hold the profiled program's own output before ncu's table (it starts at the ``"ID"``
header; the row after the header is the units). Without a table, the file's last 600 characters.
Used by the speed rounds' ncu steps (2026-12-02-speed-round6.sh: ncu-vs-cublas, -round7.sh: ncu-l2).
"""
import csv
import io
import sys

text = open(sys.argv[1]).read()
rows = [r for r in csv.reader(io.StringIO(text[text.find('"ID"'):]))] if '"ID"' in text else []
if not rows:
    print("  no ncu rows:", text[-600:])
    raise SystemExit
head = rows[0]
for r in rows[2:]:
    d = dict(zip(head, r))
    print("  " + d.get("Kernel Name", "?")[:90])
    print("    " + ", ".join(f"{k}={d[k]}" for k in head if "__" in k))
