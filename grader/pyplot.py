"""matplotlib, imported lazily, and the one lock over its global state (stdlib only until a plot is drawn).

pyplot keeps global state: one figure is drawn at a time, whichever thread draws it (the background
thread here, or the grading's: grader/outputs/plots.py, grader/occupancy/plots.py). On the ground floor
so that every floor that draws, or imports matplotlib ahead of time (grader/gpu/session.py), shares it.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

PLOT_LOCK = threading.RLock()
BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plots")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def preload() -> None:
    """Import matplotlib on the background thread now (a fraction of a second), while the grading waits for its GPU
    children, instead of when the first plot is drawn."""
    BACKGROUND.submit(pyplot)
