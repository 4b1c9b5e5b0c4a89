"""Planning a batch: which submissions (shards), which GPUs, how many workers, and whether the
machine may run untrusted code at all."""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from grader.evidence.sandbox import Confinement
from grader.sandbox import guard as sandbox
from grader.untrusted.export import BatchError, Submission


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise BatchError(f"--shard {text!r}: expected I/N with 0 <= I < N (e.g. 0/4)")
    return int(m.group(1)), int(m.group(2))


def select_shard(subs: list[Submission], shard: tuple[int, int] | None) -> list[Submission]:
    """The I-th of N slices, by sorted folder name (every N-th submission)."""
    if shard is None:
        return subs
    i, n = shard
    return [s for k, s in enumerate(sorted(subs, key=lambda s: s.folder)) if k % n == i]


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs a worker can be pinned to, as CUDA_VISIBLE_DEVICES values ([] when none)."""
    env = os.environ if env is None else env
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        listed = [ln for ln in proc.stdout.splitlines() if ln.startswith("GPU ")] if proc.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        listed = []
    if not listed:
        return []
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = []
        for part in cvd.split(","):
            part = part.strip()
            if not part or part == "-1":
                break  # CUDA stops at the first invalid entry
            ids.append(part)
        return ids
    return [str(i) for i in range(len(listed))]


# Gradings sharing one GPU by default. Its lock (``grade --gpu-lock``) lets one of them use the GPU at a
# time; the other compiles and runs its static checks meanwhile, so the GPU waits less between gradings.
PER_GPU = 2


def plan_workers(gpus: list[str], requested: int | None, per_gpu: int = PER_GPU) -> list[str | None]:
    """One slot per worker: the GPU it is pinned to (None: static grading, no GPU). By default
    ``per_gpu`` workers per GPU; ``requested`` workers are dealt to the GPUs in turn."""
    if not gpus:
        return [None] * max(1, requested or 1)
    n = requested or per_gpu * len(gpus)
    return [gpus[k % len(gpus)] for k in range(max(1, n))]


def known_times(folders: list[Path]) -> dict[str, float]:
    """{submission folder: seconds its grading took alone} from earlier batches' output folders
    (their ``submissions/<folder>/batch_status.json``: wall time less the time spent waiting for the
    GPU); a later folder's value wins."""
    from grader.outputs.grades_csv import STATUS_FILE, read_json_object
    times: dict[str, float] = {}
    for out in folders:
        for status in sorted(Path(out).glob(f"submissions/*/{STATUS_FILE}")):
            rec = read_json_object(status)
            wall = rec.get("wall_s")
            if isinstance(wall, (int, float)):
                wait = rec.get("gpu_wait_s")
                times[status.parent.name] = max(0.0, wall - (wait if isinstance(wait, (int, float)) else 0.0))
    return times


def longest_first(subs: list[Submission], times: dict[str, float]) -> list[Submission]:
    """Submissions whose earlier grading took longest first, so the batch does not end on one long
    grading while the other GPUs idle (the longest-processing-time rule). Those without a known time
    go first (they may be long); ties keep the folder order."""
    if not times:
        return list(subs)
    return sorted(subs, key=lambda s: -times.get(s.folder, float("inf")))


def sandbox_weakness() -> str:
    """Why students' code would run without bubblewrap's fence here ('' when it is fenced).

    ``grader.sandbox.guard.mode()`` says whether fenced steps run inside bubblewrap (BWRAP) or only
    under the session-kill fence and limits (WEAK, with its reason)."""
    mode = sandbox.mode()
    if mode.confinement is Confinement.BWRAP:
        return ""
    return mode.reason or "the sandbox runs without bubblewrap"


def require_sandbox(trusted: bool) -> str:
    """A note when ``trusted`` lets an unfenced batch run; raises BatchError when it does not."""
    weak = sandbox_weakness()
    if not weak:
        return ""
    if not trusted:
        raise BatchError(f"refusing to grade a whole class without the sandbox: {weak}. Install bubblewrap "
                         "(and allow unprivileged user namespaces), or pass --trusted-submissions if every "
                         "submission in the export is trusted code")
    return f"--trusted-submissions: students' code runs without the sandbox ({weak})"
