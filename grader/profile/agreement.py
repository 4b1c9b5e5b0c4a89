"""Is the code Nsight Compute measured the code that was timed? (pure)

The stage's technique items read ncu's counters of ONE launch at the profile size (settings.profile.n)
in the profile child; its speed items read the stage child's timed launches at the benchmark size. A
kernel that branches on N, on how many times it has been launched, or on the profiler's presence could
show the profiler a path it never times. After its timed launches the stage child launches the kernel a
few more times at the profile size, timed the same way (fresh inputs, L2 flushed, CUDA events:
grader/children/stage.py), and two ratios must stay within the rubric's factors either way:

* ncu's ``gpu__time_duration.sum`` of its launch against the median of those launches: the same size,
  so a different path under the profiler (or on its launch count) shows as a different duration;
* the rate (FLOP/s) of those launches against the timed launches' median: a kernel whose benchmark size
  takes another path than the profile size shows as a different rate.

An honest kernel's ratios, measured on the course GPUs with their spread, are in
docs/measurements/2026-12-06-integrity-round3.md; the factors leave room for them.
"""
from __future__ import annotations

import statistics

from grader.evidence.profile import Agreement

DURATION_METRIC = "gpu__time_duration.sum"  # ns, as ncu --print-units base prints it


def _outside(ratio: float, factor: float) -> bool:
    return not (1.0 / factor <= ratio <= factor)


def judge(profile_n: int, ncu_ns: float, profile_ms: list[float], bench_n: int, bench_ms: list[float],
          duration_factor: float | None, rate_factor: float) -> Agreement | None:
    """The comparisons, or None when a time is missing or not positive (nothing to compare).
    ``duration_factor`` None: ncu's duration is not compared (ncu locked the clocks to another
    frequency than the stage child's launches ran at), only reported."""
    good = [t for t in profile_ms if t > 0]
    timed = [t for t in bench_ms if t > 0]
    if not good or not timed or not ncu_ns > 0 or profile_n < 1 or bench_n < 1:
        return None
    p_ms, b_ms, ncu_ms = statistics.median(good), statistics.median(timed), ncu_ns * 1e-6
    duration = ncu_ms / p_ms
    rate = (profile_n**3 / p_ms) / (bench_n**3 / b_ms)
    problems = []
    if duration_factor is not None and _outside(duration, duration_factor):
        problems.append(f"Nsight Compute timed its launch at N={profile_n} at {ncu_ms:.3f} ms, while the same "
                        f"kernel at the same size took {p_ms:.3f} ms (median of {len(good)}) when launched "
                        f"without the profiler after the timed launches: {duration:.2f}x, outside the "
                        f"{duration_factor:g}x either way the grader allows")
    if _outside(rate, rate_factor):
        problems.append(f"at N={profile_n} the kernel runs at {rate:.2f}x its rate at the benchmark size "
                        f"N={bench_n} ({p_ms:.3f} ms against {b_ms:.3f} ms for {(bench_n / profile_n) ** 3:g}x "
                        f"the work), outside the {rate_factor:g}x either way the grader allows")
    problem = ""
    if problems:
        problem = ("not credited: the code Nsight Compute measured is not the code that was timed; "
                   + "; and ".join(problems) + ". A kernel must take the same path at every size, on every "
                   "launch, with or without the profiler")
    return Agreement(profile_n=profile_n, ncu_ms=ncu_ms, profile_ms=p_ms, bench_n=bench_n, bench_ms=b_ms,
                     duration_ratio=duration, rate_ratio=rate, problem=problem)
