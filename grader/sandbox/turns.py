"""One grading's GPU schedule: untimed work side by side, every timed part with the GPU alone.

A grading's GPU children do two kinds of work. Starting Python and CuPy, creating the CUDA
context, loading a cubin, the correctness runs, the checker's references and the sanitizers time
nothing, so they may share the GPU (with one rule for the correctness runs, below). The timed benchmark, the Nsight Compute launches and the
occupancy sweeps measure, so nothing else may run on the GPU meanwhile. Run one after another, the
children would spend most of a grading waiting on each other's start-up.

So every child starts at once and does its start-up side by side; then it waits at *gates*
(grader/children/protocol.py: ``wait_at_gate``), its clock held so a wait never counts against its
time limit (grader/sandbox/process.py: ``Control``). :meth:`Schedule.take_turns` opens them:

* a *shared* gate (a stage's ``correctness``): one such turn at a time, while other children may
  still start or run tools. A submission's kernels therefore never share the GPU with each other: a
  kernel that hangs or floods its output holds the correctness turn until its own limit stops it,
  and no other stage's verdict depends on it (run side by side, a hanging kernel time-sliced with a
  printf flood keeps the flood from ever finishing).
* a *tool* gate (a racecheck child's ``racecheck``, opened by the compile step with the kernel,
  grader/gpu/racecheck.py): after it the child does untimed work, as it does before its first gate; the
  shared turns go on beside it, and the exclusive ones wait for it to end.
* an *exclusive* gate (a stage's ``bench``, the occupancy child's ``sweeps``): only when no child of
  this grading is working or has a turn, so the GPU runs nothing but the kernels being timed; one at a
  time, in the order of the list handed to :meth:`Schedule.take_turns` (the rubric's), and never before
  the parties in a party's ``after`` have ended (the occupancy sweeps come after every stage run:
  grader/occupancy/early.py says why).

A child whose last turn is over says so (protocol.release_turn: it has launched its last kernel and
freed its device memory) and is then *released*: the next turn need not wait while it saves its files
and exits (for every stage child, seven times per grading).

Children that wait for a later step (the checker for the outputs to judge, the profiler for the
kernels found correct) are opened by that step with :meth:`Schedule.open`; a step about to open a
gate whose child measures (the profiler's) first waits with :meth:`Schedule.quiet` for what still
runs (the student's occupancy program, started once the timed turns were over). Nothing here decides a
verdict.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from grader.children.protocol import gate_files, release_file, write_result
from grader.evidence.protocol import ProbeResult
from grader.evidence.sandbox import PartyTimeline
from grader.sandbox.launch import ChildResult
from grader.sandbox.process import Control, usable_cpus

POLL_S = 0.01  # how often the schedule looks at its children's gate files


class State(str, Enum):
    PENDING = "pending"  # not started yet (more children than may run at once)
    WORKING = "working"  # started, doing untimed work (start-up, a tool) on the GPU
    WAITING = "waiting"  # at a gate, its clock held
    TURN = "turn"  # a gate opened: measuring, or doing the work its turn allows
    RELEASED = "released"  # its last turn said it is done with the GPU (protocol.release_turn); exiting
    DONE = "done"  # exited, whatever the way


@dataclass
class Party:
    """One child on the schedule. ``run(control)`` starts it and blocks until it ends.

    ``gates``: the gates it passes, in order (none: a child that never waits, such as racecheck).
    ``passed``: how many it has been let through; while it waits, ``gates[passed]`` is the one.
    ``after``: parties that must have ended before any of its gates opens in :meth:`Schedule.take_turns`."""

    name: str
    gates: tuple[str, ...]
    result_path: Path | None  # its RESULT.json (the gate files lie beside it)
    run: Callable[[Control], ChildResult | Any]
    control: Control = field(default_factory=Control)
    future: Future | None = None
    state: State = State.PENDING
    passed: int = 0
    early: dict[str, object] = field(default_factory=dict)  # gate -> payload, opened before it started
    after: list[Party] = field(default_factory=list)
    # Hold its clock from its start to its first gate: the start-up (Python, CuPy, the CUDA context,
    # the module) is the grader's own work, whose length depends on how many children start at once
    # (docs/measurements/2026-12-06-numbers-from-the-code.md), never on the
    # student's kernel. Its time limit then counts from its first turn; the start-up has its own
    # bound, STARTUP_LIMIT_S, after which the child is cancelled.
    hold_startup: bool = False
    started_at: float | None = None
    # A child that waits for a later step (the checker, the profiler), not for a turn: it never holds
    # the last slots a child of the turns needs to start (:meth:`Schedule._start_pending`).
    late: bool = False
    # gate -> what its go hands over when the turn comes (a stage's compiled kernel at "correctness"): a
    # record of the child protocol, or a JSON object; the go file holds its JSON form (protocol.write_result).
    payloads: dict[str, object] = field(default_factory=dict)
    # What happened to it and when, for people (tools/phase_times.py --timeline): (wall-clock time,
    # "start" | "wait <gate>" | "go <gate>" | "stop" | "end"). Nothing reads it back to decide anything.
    events: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> None:
        self.events.append((round(time.time(), 3), what))

    def files(self, gate: str) -> tuple[Path, Path]:
        assert self.result_path is not None
        return gate_files(self.result_path, gate)

    def clear_gates(self) -> None:
        """Remove gate files an earlier run left in its folder (a stale go would let it through)."""
        for gate in self.gates:
            assert self.result_path is not None
            for path in (*self.files(gate), release_file(self.result_path, gate)):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.unlink(missing_ok=True)

    def released(self) -> bool:
        """Whether it said its last turn is over (it may still be saving files and exiting)."""
        return (self.result_path is not None and self.passed == len(self.gates) > 0
                and release_file(self.result_path, self.gates[-1]).exists())

    @property
    def gate(self) -> str | None:
        """The gate it waits at (WAITING) or was last let through (TURN); else None."""
        if self.state is State.WAITING and self.passed < len(self.gates):
            return self.gates[self.passed]
        if self.state is State.TURN and self.passed:
            return self.gates[self.passed - 1]
        return None

    def result(self) -> Any:
        """What ``run`` returned; None for a party stopped before it started."""
        return None if self.future is None else self.future.result()


def parallel_children(device: ProbeResult | None) -> int:
    """How many children may run at once: one per CPU, and about 2 GiB of the GPU's memory each
    (a CUDA context with CuPy takes about 0.5 GiB; a stage run at N=4096 a few hundred MiB more)."""
    cpus = usable_cpus()
    mem_gib = (device.total_mem if device is not None else 0) // (1 << 30)
    by_memory = max(2, mem_gib // 2) if mem_gib else 4
    return max(2, min(cpus, by_memory, 32))


STARTUP_LIMIT_S = 120.0  # a held start-up (Party.hold_startup) longer than this is cancelled


class Schedule:
    """The GPU schedule of one grading (see the module docstring). One thread (the grading's) drives it;
    the pool's threads only run the children, at most ``max_children`` at once (a party counts as live
    until its run has returned)."""

    def __init__(self, max_children: int, shared_gates: tuple[str, ...] = ("correctness",),
                 tool_gates: tuple[str, ...] = ("racecheck",)):
        self.max_children = max(1, max_children)
        self.shared_gates = shared_gates
        self.tool_gates = tool_gates
        self.parties: list[Party] = []
        self._pool = ThreadPoolExecutor(max_workers=self.max_children, thread_name_prefix="gpu-child")

    # ---- starting ----------------------------------------------------------------------------------
    def add(self, party: Party, start: bool = True) -> Party:
        """Put ``party`` on the schedule; start it now if ``start`` and a slot is free (else at the
        next poll)."""
        self.parties.append(party)
        if start:
            self._start_pending()
        return party

    def _live(self) -> int:
        return sum(p.state in (State.WORKING, State.WAITING, State.TURN, State.RELEASED) for p in self.parties)

    def _start_pending(self) -> None:
        for p in self.parties:
            if p.state is State.PENDING and self._live() < self.max_children and self._may_start(p):
                p.clear_gates()
                for gate, payload in p.early.items():
                    write_result(p.files(gate)[1], payload)
                p.state = State.WORKING
                p.started_at = time.monotonic()
                p.mark("start")
                if p.hold_startup and p.gates:
                    p.control.hold()  # released at its first turn (open), or when it ends
                p.future = self._pool.submit(p.run, p.control)

    def _may_start(self, party: Party) -> bool:
        """A late party (one that waits for a later step) leaves two slots to the others while any of
        them has still to start or end: with few slots, two late parties holding every one would keep
        the turns from ever coming."""
        if not party.late:
            return True
        others = any(p.state is not State.DONE and not p.late for p in self.parties)
        return not others or self._live() < self.max_children - 2

    # ---- watching ------------------------------------------------------------------------------------
    def poll(self) -> list[Party]:
        """Update every party's state; return those that reached a gate or ended since the last poll."""
        changed = []
        for p in self.parties:
            if p.state in (State.PENDING, State.DONE):
                continue
            if p.future is not None and p.future.done():
                p.control.resume()
                p.state = State.DONE
                p.mark("end")
                changed.append(p)
            elif p.state is State.TURN and p.released():
                p.state = State.RELEASED  # the GPU is free for the next turn while it exits
                p.mark(f"release {p.gates[-1]}")
            elif p.state in (State.WORKING, State.TURN) and p.passed < len(p.gates):
                gate = p.gates[p.passed]
                if gate in p.early:  # opened by a step before it arrived: it goes straight through
                    p.control.resume()  # a held start-up ends at its first turn
                    p.passed += 1
                    p.state = State.TURN
                    p.mark(f"go {gate}")
                elif p.files(gate)[0].exists():
                    p.control.hold()  # its wait does not count against its time limit
                    p.state = State.WAITING
                    p.mark(f"wait {gate}")
                    changed.append(p)
                elif (p.hold_startup and p.passed == 0 and p.state is State.WORKING and p.started_at is not None
                        and time.monotonic() - p.started_at > STARTUP_LIMIT_S):
                    p.control.cancel.set()  # its start-up never reached the first gate
        self._start_pending()
        return changed

    def gpu_busy(self) -> bool:
        """True while a party works or has a turn. One not started yet does not count: it starts
        when a slot frees, and the exclusive turns after that wait for it; nor does one that released
        its last turn (it only saves files and exits)."""
        return any(p.state in (State.WORKING, State.TURN) for p in self.parties)

    # ---- opening gates -------------------------------------------------------------------------------
    def open(self, party: Party, payload: object | None = None) -> None:
        """Open the gate ``party`` waits at, or (not there yet) its next gate, handing it ``payload``
        (a record of the child protocol, or a JSON object); one that has not arrived goes straight
        through when it does."""
        if party.state is State.DONE or party.passed >= len(party.gates):
            return
        gate = party.gates[party.passed]
        data = payload or party.payloads.get(gate) or {"go": True}
        if party.state is State.WAITING:
            write_result(party.files(gate)[1], data)
            party.control.resume()
            party.passed += 1
            party.state = State.TURN
            party.mark(("stop " if isinstance(data, dict) and data.get("stop") else "go ") + gate)
            return
        party.early[gate] = data
        if party.state is not State.PENDING:
            write_result(party.files(gate)[1], data)

    def stop(self, party: Party) -> None:
        """End a waiting party without its gated part (the go file says stop), or cancel a running one."""
        if party.state in (State.DONE, State.RELEASED):
            return  # a released party is only saving its files and exiting, within its own limits
        if party.state is State.PENDING:
            party.state = State.DONE  # never started
            party.mark("not started")
        elif party.state is State.WAITING:
            self.open(party, {"stop": True})
        else:
            party.control.cancel.set()
            party.mark("cancel")
            if party.passed < len(party.gates) and party.result_path is not None:
                write_result(party.files(party.gates[party.passed])[1], {"stop": True})  # should it get there

    def settle(self, until: Callable[[], bool], on_change: Callable[[Party], None] = lambda _p: None) -> None:
        """Poll until ``until()`` is true, calling ``on_change`` for every party that arrived at a
        gate or ended."""
        while True:
            for p in self.poll():
                on_change(p)
            if until():
                return
            time.sleep(POLL_S)

    def _next_turn(self, order: list[Party]) -> tuple[Party, bool] | None:
        """The party whose gate may open now, and whether that gate is exclusive; None: none yet."""
        turns = [p.gate for p in self.parties if p.state is State.TURN and p.gate not in self.tool_gates]
        ready = [p for p in order if p.state is State.WAITING and all(q.state is State.DONE for q in p.after)]
        if not any(g not in self.shared_gates for g in turns):  # nothing measuring now
            if not any(g in self.shared_gates for g in turns):  # one shared turn at a time
                shared = next((p for p in ready if p.gate in self.shared_gates), None)
                if shared is not None:
                    return shared, False
        if not self.gpu_busy():
            alone = next((p for p in ready if p.gate not in self.shared_gates), None)
            if alone is not None:
                return alone, True
        return None

    def take_turns(self, parties: list[Party], on_change: Callable[[Party], None] = lambda _p: None,
                   may_go: Callable[[Party], bool] = lambda _p: True) -> None:
        """Let ``parties`` through their gates (see the module docstring), in the list's order; return
        when all have ended. ``may_go(party)`` before an exclusive turn: False stops it at its gate."""
        order = list(parties)
        while True:
            for p in self.poll():
                on_change(p)
            if all(p.state is State.DONE for p in order):
                return
            nxt = self._next_turn(order)
            if nxt is not None:
                party, exclusive = nxt
                if exclusive and not may_go(party):
                    self.stop(party)
                else:
                    self.open(party)
                continue
            time.sleep(POLL_S)

    def quiet(self) -> None:
        """Block until no party works or has a turn (every one has ended, waits at a gate, or waits for
        a slot): before a step opens a gate whose child measures."""
        self.settle(lambda: not self.gpu_busy())

    def wait(self, party: Party) -> Any:
        """Block until ``party`` ends (updating the schedule meanwhile); its result."""
        self.settle(lambda: party.state is State.DONE)
        return party.result()

    def timeline(self) -> list[PartyTimeline]:
        """Every party's events, in the order they were added (grading.json's ``timeline``)."""
        return [PartyTimeline(p.name, list(p.events)) for p in self.parties]

    # ---- ending --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every party still on the schedule and wait for all: nothing outlives the grading."""
        for p in self.parties:
            if p.state is not State.DONE:
                self.stop(p)
        for p in self.parties:
            if p.future is not None:
                try:
                    p.future.result()
                except Exception:  # noqa: BLE001 - a child's failure is recorded by its own step
                    pass
                if p.state is not State.DONE:
                    p.mark("end")
                p.state = State.DONE
        self._pool.shutdown(wait=True)
