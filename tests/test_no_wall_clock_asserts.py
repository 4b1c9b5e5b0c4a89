"""No test asserts a wall-clock time (DEVELOPERS.md): on a shared or busy machine such an assert fails at
random, and speed belongs in a benchmark that prints its number (tools/, docs/measurements/), not in a
pass/fail. A generous timeout that stops a hang (``timeout=`` of a wait, a deadline loop) is a safety net
and is not an assert.

Found from the syntax tree: an ``assert`` that bounds a measured time from above by a threshold
(``elapsed < 3``, ``10 > took``); a lower bound (it waited at least its limit) cannot fail on a slow machine. A measured time is a name assigned from a clock in the
same function (``time.monotonic()``, ``perf_counter()``, ``time.time()``...) or a name, attribute or key
that says so (``elapsed``, ``wall_s``, ``took``, ``seconds``, ``duration``); a threshold is a number fixed in
the code (a literal, a CONSTANT, arithmetic of them). Comparing two measured times (one phase within its
whole, one event after another) and asking a time to be positive (``> 0``) are not thresholds.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns", "process_time"}
TIME_WORD = re.compile(r"^(elapsed\w*|\w*_elapsed|wall|\w*wall_s|\w*wall_ms|took|seconds|\w*_seconds|duration(_s|_ms)?)$")
UPPER = (ast.Lt, ast.LtE)  # "left below right"; ``>``/``>=`` are read with the sides swapped


def _calls_a_clock(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in CLOCKS:
                return True
    return False


def _word(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _is_time(node: ast.AST, clocked: set[str]) -> bool:
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}  # derived_seconds(...) computes
    for sub in ast.walk(node):
        word = None if id(sub) in called else _word(sub)
        if word is not None and (word in clocked or TIME_WORD.match(word)):
            return True
        if isinstance(sub, ast.Call) and _calls_a_clock(sub):
            return True
    return False


def _is_threshold(node: ast.AST) -> bool:
    """A number fixed in the code: literals, CONSTANT names (``sandbox.DRAIN_GRACE_S`` too) and arithmetic
    of them, but not 0 (a time asked to be positive). A side with a variable in it (another event's
    time, a stage's derived limit) is an order or a relation, not a threshold."""
    if isinstance(node, ast.Constant) and node.value == 0:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and not sub.id.isupper():
            return False
        if isinstance(sub, ast.Attribute) and not sub.attr.isupper():
            return False
        if isinstance(sub, (ast.Call, ast.Subscript)):
            return False
    return True


def wall_clock_asserts(source: str) -> list[int]:
    """The lines of ``source``'s asserts that compare a measured time with a threshold."""
    tree = ast.parse(source)
    found: list[int] = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))]
    for scope in scopes:
        clocked = {t.id for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                   and n.value is not None and _calls_a_clock(n.value)
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        body = scope.body
        for node in (n for stmt in body for n in ast.walk(stmt)):
            if not isinstance(node, ast.Assert):
                continue
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [cmp.left, *cmp.comparators]
                for op, left, right in zip(cmp.ops, sides, sides[1:]):
                    if isinstance(op, (ast.Gt, ast.GtE)):
                        left, right = right, left
                    elif not isinstance(op, UPPER):
                        continue
                    # an upper bound on a measured time: a lower one (it waited its limit) cannot flake
                    if _is_time(left, clocked) and not _is_time(right, clocked) and _is_threshold(right):
                        found.append(node.lineno)
    return sorted(set(found))


def test_the_finder_flags_time_thresholds_and_nothing_else():
    flagged = '''
import time
def t(run, g):
    start = time.monotonic()
    elapsed = time.monotonic() - start
    assert elapsed < 3
    assert g.wall_s < LIMIT, "too slow"
    assert 1.0 <= run["seconds"] <= 2.0
    assert time.perf_counter() - start < 2
    assert 5 > took
'''
    assert wall_clock_asserts(flagged) == [6, 7, 8, 9, 10]
    fine = '''
import time
def t(run, took, timeout_s, elapsed):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pass
    assert run.wall_s > 0 and 0 < run.seconds
    assert sum(took[n] for n in took) <= took["compile"] + 0.01
    assert run.count < 3 and timeout_s == 5
    assert run.p50_s <= run.p95_s and run.started >= last_stage and ran <= limit["seconds"]
    assert elapsed >= 1.0 and derived_seconds(stage) < 10.0 and abs(run.duration_ratio - 1) < 1e-9
'''
    assert wall_clock_asserts(fine) == []


def test_no_test_asserts_a_wall_clock_time():
    found = {f"{path.relative_to(TESTS.parent)}:{line}": path.read_text(encoding="utf-8").splitlines()[line - 1].strip()
             for path in sorted(TESTS.rglob("*.py")) if "submissions" not in path.parts and "fake_cupy" not in path.parts
             for line in wall_clock_asserts(path.read_text(encoding="utf-8"))}
    assert found == {}, ("asserts on a wall-clock time (a flaky test on a busy machine; print the number from a "
                         "benchmark instead, docs/measurements/scripts/, and bound a hang with a timeout): "
                         + "\n".join(f"{k}: {v}" for k, v in found.items()))
