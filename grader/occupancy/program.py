"""Run the student's occupancy program and read the one JSON document it prints.

The program is the student's code: it runs through :func:`grader.compile.student.run_guarded`
(time limit, trimmed output, the sandbox fence) as the student user. Its stdout must hold one
JSON object of the documented format (``occupancy-v1``); text before it and C's ``nan``/``inf``
are tolerated, anything else is a message naming what is wrong.

What it prints is graded for its numbers from the Occupancy API and its launch shapes; the run
times it prints (``time_ms``) only go to the plot, never into a verdict. So it needs no turn with
the GPU alone: in a grading it runs once the timed turns are over (grader/occupancy/early.py).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

from grader.model import ProcRecord
from grader.sandbox.fence import Fence
from grader.sandbox.guard import host_code_user, run_guarded, student_user
from grader.sandbox.process import Control
from grader.untrusted.quote import fence_block, quote_code

PROGRAM_TIMEOUT_S = 45.0
PROGRAM_OUTPUT_LIMIT = 256 * 1024  # bytes kept per stream; the JSON is a few KB
_NON_JSON_NUMBER = re.compile(r"(?<=[:\[,\s])[-+]?(?:nan|inf(?:inity)?)(?=\s*[,\]\}])", re.I)


def parse_program_output(stdout: str) -> tuple[dict | None, str | None]:
    """The program's JSON document from its stdout: (document, None) or (None, why not).

    Lenient about text before the document and about C's ``nan``/``inf`` (read as null);
    strict about it being one JSON object.
    """
    text = stdout.strip()
    if not text:
        return None, "the program printed nothing on stdout (expected one JSON document)"
    start = text.find("{")
    if start < 0:
        return None, f"the program's stdout holds no JSON object: {quote_code(text, 300)}"
    decoder = json.JSONDecoder()
    body = _NON_JSON_NUMBER.sub("null", text[start:])
    try:
        doc, end = decoder.raw_decode(body)
    except ValueError as exc:
        line = body.count("\n", 0, getattr(exc, "pos", 0) or 0) + 1
        return None, (f"the program's output is not valid JSON (line {line} of the document: "
                      f"{getattr(exc, 'msg', exc)})")
    except RecursionError:
        return None, "the program's output is nested too deeply to be the documented format"
    if not isinstance(doc, dict):
        return None, f"the program's output is a JSON {type(doc).__name__}, not an object"
    return doc, None


def run_program(exe: Path, work: Path, timeout_s: float | None = None, *, fence: Fence | None = None,
                control: Control | None = None) -> tuple[dict | None, str | None, ProcRecord | None]:
    """Run the student's program (all sections) as the student user; (document, problem, process record).
    ``control``: the GPU schedule's cancel (grader/occupancy/early.py runs it on the schedule)."""
    timeout_s = timeout_s or PROGRAM_TIMEOUT_S
    # Fenced, never as root: RLIMIT_NPROC does not bind root, so a fork bomb must run as another uid
    # (the fence hands its scratch over to that user; unfenced there is nothing to hand over).
    user = host_code_user() if fence is not None else student_user()
    if user:
        for path, mode in ((work, 0o755), (exe.parent, 0o755), (exe, 0o755)):
            try:
                os.chmod(path, mode)
            except OSError:
                pass
    if fence is not None and user:
        # The fence hands its scratch folder to that user. The measurement child writes its results in
        # ``work`` (as root, without capabilities inside bwrap), and may run while the program does (a
        # submission with no timed stage): so the program gets a scratch folder of its own, and sees its
        # build folder read-only.
        own = work / "program"
        own.mkdir(exist_ok=True)
        fence = dataclasses.replace(fence, scratch=own, readonly=(*fence.readonly, exe.parent))
    try:
        proc = run_guarded([str(exe)], cwd=exe.parent, timeout_s=timeout_s, output_limit=PROGRAM_OUTPUT_LIMIT,
                           user=user, fence=fence, control=control)
    except ValueError as exc:  # an unknown user: the grader's set-up, not the student's
        return None, f"not evaluated: the program could not be started ({exc})", None
    if proc.timed_out:
        return None, (f"the program did not finish within {timeout_s:g} s (look for a kernel or loop "
                      f"that never ends); its last output:{fence_block(proc.stderr or proc.stdout, 600)}"), proc
    if proc.returncode is None:
        return None, f"not evaluated: the program could not be started: {quote_code(proc.stderr.strip(), 300)}", proc
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        msg = f"the program ended with {proc.brief()}" + (f": {quote_code(lines[-1], 200)}" if lines else "")
        if len(lines) > 1:
            msg += "\nits stderr ends with:" + fence_block(proc.stderr, 800)
        return None, msg, proc
    if proc.stdout_bytes > PROGRAM_OUTPUT_LIMIT:
        return None, (f"the program printed {proc.stdout_bytes:,} bytes on stdout; the grader reads at "
                      f"most {PROGRAM_OUTPUT_LIMIT:,} (print the JSON document only; tables go to "
                      f"stderr)"), proc
    doc, problem = parse_program_output(proc.stdout)
    if doc is not None and doc.get("format") not in (None, "occupancy-v1"):
        problem, doc = (f"the program's output has format {doc.get('format')!r}; expected "
                        f"\"occupancy-v1\""), None
    return doc, problem, proc
