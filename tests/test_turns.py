"""The GPU schedule (grader/sandbox/turns.py) with real child processes and the real gate protocol.

No GPU is needed: each child is a small Python program that records when it does its untimed part
and its gated part; the schedule must never let a gated part overlap any other child's work, must
hold a waiting child's clock, and must leave nothing running.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from grader.children.protocol import GateClosed, gate_files, wait_at_gate, write_result
from grader.model import Limit
from grader.sandbox.launch import ChildResult
from grader.sandbox.process import Control, run_process
from grader.sandbox.turns import Party, Schedule, State
from tests.hang_guard import no_hang

ROOT = Path(__file__).resolve().parent.parent

# A child: untimed work for WORK seconds, then for each gate: the gate, then TURN seconds of work.
# It writes its intervals (monotonic clock, shared by processes on one machine) to RESULT.json:
# "work" and, per gate, the interval after it opened ("turn" is the last gate's).
CHILD = r"""
import json, sys, time
from pathlib import Path
from grader.children.protocol import GateClosed, wait_at_gate, write_result
result, work, gates, turn = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
t0 = time.monotonic(); time.sleep(work); t1 = time.monotonic()
out = {"work": [t0, t1]}
write_result(result, out)
for gate in [g for g in gates.split(",") if g != "-"]:
    try:
        got = wait_at_gate(result, gate)
    except GateClosed:
        out["stopped"] = True
        write_result(result, out)
        sys.exit(0)
    t2 = time.monotonic(); time.sleep(turn); t3 = time.monotonic()
    out.update({gate: [t2, t3], "turn": [t2, t3], "got": got})
    write_result(result, out)
if len(sys.argv) > 5:  # done with the GPU: release the last turn, then linger (saving files, exiting)
    from grader.children.protocol import release_turn
    release_turn(result, gate)
    out["released"] = time.monotonic()
    write_result(result, out)
    time.sleep(float(sys.argv[5]))
"""


def child_party(tmp: Path, name: str, work: float, gate: str | tuple[str, ...] | None, turn: float = 0.0,
                timeout_s: float = 30.0, linger: float | None = None) -> Party:
    result = tmp / f"{name}_result.json"
    script = tmp / "child.py"
    if not script.exists():  # written once, whole: a child already started may be reading it
        staged = tmp / "child.py.part"
        staged.write_text(CHILD)
        staged.replace(script)
    gates = (gate,) if isinstance(gate, str) else tuple(gate or ())

    def run(control: Control) -> ChildResult:
        tail = [] if linger is None else [str(linger)]
        proc = run_process([sys.executable, str(script), str(result), str(work), ",".join(gates) or "-", str(turn),
                            *tail],
                           timeout_s=timeout_s, cwd=tmp, env={"PYTHONPATH": str(ROOT)}, output_limit=4000,
                           control=control)
        data = json.loads(result.read_text()) if result.exists() else None
        return ChildResult(proc, data, result, result)

    return Party(name, gates, result, run)


def overlaps(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def three_stages_and_a_tool(tmp_path: Path, gate: str | tuple[str, ...], work: list[float], turn: float,
                            tool_s: float) -> tuple[list[Party], Party, dict[str, dict]]:
    """Three gated stage children and an ungated tool, through take_turns; what each recorded."""
    sched = Schedule(max_children=8)
    stages = [sched.add(child_party(tmp_path, f"s{i}", work=work[i], gate=gate, turn=turn), start=False)
              for i in range(3)]
    tool = sched.add(child_party(tmp_path, "racecheck", work=tool_s, gate=None), start=False)
    try:
        sched.take_turns(stages)
    finally:
        sched.close()
    return stages, tool, {p.name: p.result().result for p in [*stages, tool]}


def test_turns_are_alone_and_in_order(tmp_path: Path) -> None:
    stages, racecheck, runs = three_stages_and_a_tool(tmp_path, "bench", [0.3, 0.2, 0.1], 0.15, 0.8)
    turns = [runs[f"s{i}"]["turn"] for i in range(3)]
    # In the list's order, one after another...
    assert turns[0][1] <= turns[1][0] and turns[1][1] <= turns[2][0]
    # ...and none overlapping any untimed work, racecheck's (the longest) included.
    for t in turns:
        for other in runs.values():
            assert not overlaps(t, other["work"])
    assert all(p.state is State.DONE and p.result().proc.ok for p in [*stages, racecheck])


def test_correctness_turns_one_at_a_time_beside_tools_and_benches_alone(tmp_path: Path) -> None:
    """Stages pass "correctness" (shared: one stage at a time, while a tool may run) then "bench"
    (exclusive: nothing else at all)."""
    _stages, _tool, runs = three_stages_and_a_tool(tmp_path, ("correctness", "bench"), [0.05] * 3, 0.2, 1.0)
    checks = [runs[f"s{i}"]["correctness"] for i in range(3)]
    benches = [runs[f"s{i}"]["bench"] for i in range(3)]
    for i, a in enumerate(checks):  # the stages' kernels never share the GPU with each other
        assert not any(overlaps(a, b) for b in checks[i + 1:])
    assert any(overlaps(c, runs["racecheck"]["work"]) for c in checks)  # but do run beside the tool
    for b in benches:
        for other in [*checks, *(x for x in benches if x is not b), runs["racecheck"]["work"]]:
            assert not overlaps(b, other)
    assert benches[0][1] <= benches[1][0] <= benches[2][0]


def test_the_timeline_records_each_childs_start_gates_and_end_in_order(tmp_path: Path) -> None:
    """Schedule.timeline (grading.json's "timeline"): what each child did when, in the order it did it,
    and a bench's "go" only after every other child's work ended (the racecheck tool's "end")."""
    t0 = time.time()
    stages, tool, _runs = three_stages_and_a_tool(tmp_path, ("correctness", "bench"), [0.05] * 3, 0.1, 0.8)
    sched_line = {p.name: [what for _t, what in p.events] for p in [*stages, tool]}
    for s in stages:
        assert sched_line[s.name] == ["start", "wait correctness", "go correctness", "wait bench", "go bench", "end"]
        times = [t for t, _ in s.events]
        # Events are kept to the millisecond (round(time.time(), 3)); rounding is monotonic, so the
        # bounds are rounded the same way (an event 0.3 ms before now may read 0.7 ms after it).
        assert times == sorted(times) and round(t0, 3) <= times[0] and times[-1] <= round(time.time(), 3)
    assert sched_line["racecheck"] == ["start", "end"]
    tool_end = tool.events[-1][0]
    assert all(dict((w, t) for t, w in s.events)["go bench"] >= tool_end for s in stages)


def test_a_released_turn_lets_the_next_one_start_while_the_child_exits(tmp_path: Path) -> None:
    """A child that says its last turn is over (protocol.release_turn) stops counting as busy: the next
    exclusive turn starts while it still lingers (saving files, exiting), and it still ends DONE."""
    sched = Schedule(max_children=4)
    first = sched.add(child_party(tmp_path, "s0", work=0.05, gate="bench", turn=0.1, linger=1.5), start=False)
    second = sched.add(child_party(tmp_path, "s1", work=0.05, gate="bench", turn=0.1), start=False)
    try:
        sched.take_turns([first, second])
    finally:
        sched.close()
    a, b = first.result().result, second.result().result
    events = {p.name: [w for _t, w in p.events] for p in (first, second)}
    assert events["s0"] == ["start", "wait bench", "go bench", "release bench", "end"]
    assert b["bench"][0] >= a["released"]  # after the release...
    assert b["bench"][0] < a["released"] + 1.0  # ...not after the 1.5 s the first child lingered
    assert first.state is State.DONE and first.result().proc.ok


def test_a_waiting_childs_clock_is_held(tmp_path: Path) -> None:
    """A child whose limit (1.5 s) is shorter than its wait for the GPU (another child's 2 s turn)
    still finishes: the wait does not count. A child over its limit in its own work is stopped. (The
    short child's own time, its start, 0.05 s of work and its 0.1 s turn, is about a fifth of its limit.)"""
    sched = Schedule(max_children=8)
    long = sched.add(child_party(tmp_path, "long", work=0.0, gate="bench", turn=2.0), start=False)
    short = sched.add(child_party(tmp_path, "short", work=0.05, gate="bench", turn=0.1, timeout_s=1.5), start=False)
    hangs = sched.add(child_party(tmp_path, "hangs", work=0.05, gate="bench", turn=60, timeout_s=1.5), start=False)
    try:
        sched.take_turns([long, short, hangs])
    finally:
        sched.close()
    assert long.result().proc.ok and short.result().proc.ok
    assert short.result().result["bench"][0] >= long.result().result["bench"][1]  # it did wait for long
    assert short.result().proc.wall_s > 1.5  # it lived past its 1.5 s limit, waiting
    h = hangs.result().proc
    assert h.timed_out and h.limit is Limit.TIME
    assert h.wall_s - hangs.control.held_s() > 1.2  # stopped on its own clock (its 60 s turn was cut short)


def test_a_held_start_up_does_not_count_and_the_turn_still_does(tmp_path: Path) -> None:
    """A stage child's start-up (here 1.2 s of untimed work before its first gate) is held with
    hold_startup, so a 1 s limit does not stop it; the limit still counts from its first turn."""
    sched = Schedule(max_children=8)
    slow = child_party(tmp_path, "slow_start", work=1.2, gate="bench", turn=0.1, timeout_s=1.0)
    slow.hold_startup = True
    hang = child_party(tmp_path, "hang_after_start", work=1.2, gate="bench", turn=60, timeout_s=1.0)
    hang.hold_startup = True
    plain = child_party(tmp_path, "plain", work=1.2, gate="bench", turn=0.1, timeout_s=1.0)  # not held
    for p in (slow, hang, plain):
        sched.add(p, start=False)
    try:
        sched.take_turns([slow, hang, plain])
    finally:
        sched.close()
    assert slow.result().proc.ok and slow.control.held_s() >= 1.1
    h = hang.result().proc
    assert h.timed_out and h.wall_s - hang.control.held_s() > 0.8  # its turn had its own limit
    assert plain.result().proc.timed_out  # without the hold, the start-up counts


def test_a_step_opens_a_gate_with_a_payload_and_stop_ends_a_waiting_child(tmp_path: Path) -> None:
    sched = Schedule(max_children=4)
    checker = sched.add(child_party(tmp_path, "checker", work=0.1, gate="compare"))
    unused = sched.add(child_party(tmp_path, "ncu", work=0.1, gate="launch"))
    sched.settle(lambda: checker.state is State.WAITING and unused.state is State.WAITING)
    sched.open(checker, {"stages": ["a", "b"]})
    assert sched.wait(checker).result["got"] == {"stages": ["a", "b"]}
    sched.stop(unused)
    assert sched.wait(unused).result.get("stopped") is True
    sched.close()


def test_one_slot_does_not_deadlock(tmp_path: Path) -> None:
    sched = Schedule(max_children=1)
    parties = [sched.add(child_party(tmp_path, f"p{i}", work=0.05, gate="bench", turn=0.05), start=False)
               for i in range(4)]
    sched.take_turns(parties)
    sched.close()
    assert all(p.result().proc.ok and "turn" in p.result().result for p in parties)


def test_close_ends_everything_and_budget_stops_at_the_gate(tmp_path: Path) -> None:
    sched = Schedule(max_children=8)
    a = sched.add(child_party(tmp_path, "a", work=0.05, gate="bench", turn=0.05), start=False)
    b = sched.add(child_party(tmp_path, "b", work=0.05, gate="bench", turn=0.05), start=False)
    sched.take_turns([a, b], may_go=lambda p: p.name == "a")
    assert "turn" in a.result().result and b.result().result.get("stopped") is True
    runaway = sched.add(child_party(tmp_path, "runaway", work=120, gate=None))
    waiting = sched.add(child_party(tmp_path, "waiting", work=0.0, gate="launch"))
    sched.settle(lambda: waiting.state is State.WAITING)
    with no_hang("closing a schedule with a runaway child"):
        sched.close()
    assert runaway.result().proc.limit is Limit.CANCELLED
    assert waiting.result().result.get("stopped") is True


def test_control_hold_and_cancel_on_run_process(tmp_path: Path) -> None:
    control = Control()
    control.hold()  # held from the start: a 0.2 s limit does not stop a 0.5 s sleep
    rec = run_process([sys.executable, "-c", "import time; time.sleep(0.5)"], timeout_s=0.2, cwd=tmp_path,
                      env={}, output_limit=1000, control=control)
    assert rec.ok and not rec.timed_out
    control = Control()
    control.cancel.set()
    rec = run_process([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=60, cwd=tmp_path,
                      env={}, output_limit=1000, control=control)
    assert rec.limit is Limit.CANCELLED and not rec.ok


def test_gate_protocol_in_process(tmp_path: Path) -> None:
    result = tmp_path / "x_result.json"
    wait_file, go_file = gate_files(result, "bench")
    write_result(go_file, {"stop": True})
    with pytest.raises(GateClosed):
        wait_at_gate(result, "bench")
    assert wait_file.exists()
    go_file.write_text("[1, 2]")  # not an object: closed, never a crash
    with pytest.raises(GateClosed):
        wait_at_gate(result, "bench")
    write_result(go_file, {"stages": ["s"]})
    assert wait_at_gate(result, "bench") == {"stages": ["s"]}


def test_the_real_checker_starts_early_and_judges_what_its_gate_hands_it(tmp_path: Path) -> None:
    """grader.children check with ``"gate": true`` (NumPy here, CuPy on a GPU): it starts, waits at
    ``compare`` with its clock held, and judges the stages the opening step names: one right, one wrong."""
    import numpy as np

    from grader.children.inputs import make_inputs_xp
    from grader.children.protocol import CHECK
    from grader.evidence.protocol import CheckSpec
    from grader.sandbox.launch import launch
    n = 32
    a, b = make_inputs_xp(np, n, 3, "fp32")
    right = (a.astype(np.float64) @ b).astype(np.float32)
    np.save(tmp_path / "right.npy", right)
    np.save(tmp_path / "wrong.npy", right + 1)
    work = tmp_path / "work"

    def run(control: Control) -> ChildResult:
        return launch(CHECK, CheckSpec(gate=True), work, 60, 20_000, control=control)

    sched = Schedule(max_children=2)
    checker = sched.add(Party("checker", ("compare",), work / "check_result.json", run))
    sched.settle(lambda: checker.state in (State.WAITING, State.DONE))
    assert checker.state is State.WAITING, checker.result().proc.stderr
    time.sleep(0.3)  # the grading's other steps
    stages = [{"id": sid, "inputs": "fp32", "rtol": 1e-4, "out_dir": str(tmp_path),
               "cases": [{"n": n, "seed": 3, "file": f"{sid}.npy", "kind": "check"}]} for sid in ("right", "wrong")]
    sched.open(checker, {"stages": stages})
    got = sched.wait(checker)
    sched.close()
    assert got.proc.ok, got.proc.stderr
    verdicts = got.result.verdicts
    assert verdicts["right"].cases[0].passed is True and verdicts["wrong"].cases[0].passed is False
    assert "wait" not in got.result.times and checker.control.held_s() >= 0.3  # the grader times the wait


def test_a_tool_gate_lets_the_shared_turns_go_on_and_holds_the_exclusive_ones(tmp_path):
    """racecheck's child, once its gate ``racecheck`` opens, does untimed work: a stage's correctness
    turn may run beside it (before, the racecheck turn counted as measuring and held every turn back
    until it ended: 0.9 s of a grading on an H200), a benchmark may not."""
    sched = Schedule(max_children=8)
    tool = sched.add(child_party(tmp_path, "racecheck", work=0.0, gate="racecheck", turn=1.0))
    stage = sched.add(child_party(tmp_path, "s0", work=0.2, gate=("correctness", "bench"), turn=0.2))
    try:
        sched.settle(lambda: tool.state is State.WAITING)
        sched.open(tool)
        sched.take_turns([stage])
        sched.wait(tool)
    finally:
        sched.close()
    race, run = tool.result().result, stage.result().result
    assert overlaps(race["racecheck"], run["correctness"])  # the shared turn went on beside it
    assert not overlaps(race["racecheck"], run["bench"]) and run["bench"][0] >= race["racecheck"][1]
