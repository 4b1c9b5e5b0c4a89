"""The correctness test, in one place (pure; works on numpy or cupy arrays).

An element passes when ``|c - r| <= rtol * (|r| + rms(r))`` where ``r`` is the
float64 reference and ``rms(r)`` its root-mean-square. The ``rms`` term is an
absolute tolerance scaled to the matrix, so elements of C that happen to be
near zero are judged by the size of the whole result, not by their own tiny
magnitude. NaN and infinity never pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Comparison:
    passed: bool
    n: int
    max_abs_err: float
    max_scaled_err: float  # max |c - r| / (|r| + rms(r)); passes when <= rtol
    rtol: float
    bad_count: int
    nonfinite_count: int
    first_bad: tuple[int, int] | None = None
    got: float | None = None
    expected: float | None = None

    def describe(self) -> str:
        if self.passed:
            return (f"N={self.n}: ok (max scaled error {self.max_scaled_err:.2e} <= rtol {self.rtol:g})")
        where = ""
        if self.first_bad is not None:
            i, j = self.first_bad
            where = f"; first bad element C[{i}][{j}] = {self.got!r}, expected {self.expected:.6g}"
        what = f"{self.bad_count:,} of {self.n * self.n:,} elements out of tolerance"
        if self.nonfinite_count:
            what += f" ({self.nonfinite_count:,} NaN or infinite: never written, or overflowed)"
        return (f"N={self.n}: WRONG: {what}; max scaled error {self.max_scaled_err:.3g} "
                f"(rtol {self.rtol:g}){where}")


def compare(c: Any, ref: Any, rtol: float, xp: Any) -> Comparison:
    """Compare output ``c`` with float64 reference ``ref`` (both n x n, same module ``xp``)."""
    n = int(ref.shape[0])
    if tuple(c.shape) != tuple(ref.shape):
        return Comparison(False, n, float("inf"), float("inf"), rtol, n * n, 0)
    c64 = c.astype(xp.float64)
    rms = float(xp.sqrt(xp.mean(ref * ref)))
    finite = xp.isfinite(c64)
    err = xp.abs(c64 - ref)
    scaled = err / (xp.abs(ref) + rms) if rms > 0 else err
    bad = ~finite | (scaled > rtol)
    bad_count = int(bad.sum())
    nonfinite = int((~finite).sum())
    finite_scaled = xp.where(finite, scaled, 0)
    max_scaled = float("inf") if nonfinite else float(finite_scaled.max())
    max_abs = float("inf") if nonfinite else float(xp.where(finite, err, 0).max())
    result = Comparison(bad_count == 0, n, max_abs, max_scaled, rtol, bad_count, nonfinite)
    if bad_count:
        flat = int(xp.argmax(bad.ravel()))
        i, j = divmod(flat, n)
        result.first_bad = (i, j)
        result.got = float(c64[i, j])
        result.expected = float(ref[i, j])
    return result
