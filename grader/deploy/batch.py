"""Grade a whole Gradescope export: one worker per visible GPU, resumable, one CSV.

    python grader/run_local.py EXPORT --batch [--out DIR] [--workers N] [--force] [--no-gpu]
                                             [--stages a,b] [--timeout S] [--shard I/N]
    python -m grader.deploy.batch merge OUT1 OUT2 ... --out grades.csv

EXPORT is Gradescope's "Download Submissions" export (the zip or its unpacked folder): a
``submission_metadata.yml`` at its root (``submission_<id>: {':submitters': [{':name', ':sid',
':email'}], ':created_at', ...}``) and one folder ``submission_<id>/`` per submission holding the
student's files.

- Every submission is graded by its own child ``run_local.py`` process under a time limit
  (``--timeout``, default 3600 s), so one that crashes or hangs the grader costs only its own row.
- One worker per GPU that is visible (``CUDA_VISIBLE_DEVICES`` or ``nvidia-smi -L``); worker ``i``
  runs its children with ``CUDA_VISIBLE_DEVICES`` set to its GPU alone. Without a GPU (or with
  ``--no-gpu``) grading is static and ``--workers`` (default 1) children run side by side.
- Resumable: a submission whose ``OUT/submissions/<folder>/results.json`` exists is skipped unless
  ``--force`` (``--retry-failed`` re-grades only those whose grading failed or timed out). Each
  grading writes into ``<folder>.partial/`` and is renamed when done, so an interrupted batch leaves
  nothing that looks finished.
- ``OUT/grades.csv``: submission id, folder, names, emails, SIDs (``; `` between group members),
  created_at, status, total, max_total, one column per rubric item (``stage.item``), and the
  leaderboard values; ``OUT/batch.json``: the run's workers, GPUs and wall time.
- ``--shard I/N`` grades the I-th of N slices (by sorted folder name): Slurm array jobs
  (tools/slurm_batch.sbatch) shard an export across nodes; ``merge`` joins their CSVs.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from grader.run import sandbox
from grader.outputs.results import error_results, write_results

from grader import REPO_ROOT  # noqa: E402
RUN_LOCAL = REPO_ROOT / "grader" / "run_local.py"
DEFAULT_RUBRIC = REPO_ROOT / "rubric.yaml"
METADATA_NAME = "submission_metadata.yml"
DEFAULT_TIMEOUT_S = 3600.0
LOG_LIMIT = 200_000  # bytes of a child's output kept in its log.txt
STATUS_FILE = "batch_status.json"
META_COLUMNS = ["submission_id", "folder", "names", "emails", "sids", "created_at", "status",
                "total", "max_total"]

# Statuses of one submission.
GRADED = "graded"              # run_local.py exit 0
GRADER_ERROR = "grader_error"  # exit 3 (the grader's own failure), or no results.json
USAGE_ERROR = "usage_error"    # exit 2 (e.g. the folder is not a submission)
TIMED_OUT = "timed_out"
MISSING_FOLDER = "missing_folder"  # in the metadata, but the export has no folder for it
FAILED_STATUSES = (GRADER_ERROR, USAGE_ERROR, TIMED_OUT)


class BatchError(Exception):
    """Bad input (no export, bad --shard): exit code 2."""


# --------------------------------------------------------------------------------------------
# The export
# --------------------------------------------------------------------------------------------
@dataclass
class Submission:
    folder: str                   # submission_<id>: the export's folder name, unique
    path: Path | None             # None when the metadata lists it but the folder is missing
    meta: dict[str, Any] | None   # its metadata entry; None when the metadata does not list it

    @property
    def submission_id(self) -> str:
        return self.folder[len("submission_"):] if self.folder.startswith("submission_") else self.folder

    def submitters(self) -> list[dict[str, str]]:
        out = []
        for s in (self.meta or {}).get(":submitters") or (self.meta or {}).get("submitters") or []:
            if isinstance(s, dict):
                out.append({k: "" if _pick(s, k) is None else str(_pick(s, k)) for k in ("name", "sid", "email")})
        return out

    def created_at(self) -> str:
        value = _pick(self.meta or {}, "created_at")
        if isinstance(value, (dt.datetime, dt.date)):
            return value.isoformat()
        return "" if value is None else str(value)


def _pick(d: dict, key: str) -> Any:
    """Gradescope writes Ruby-symbol keys (':name'); accept plain ones too."""
    return d.get(f":{key}", d.get(key))


def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that reads unknown tags (e.g. Ruby's !ruby/object:BigDecimal) as plain data."""

    def unknown(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", unknown)
    Loader.add_multi_constructor("tag:", unknown)
    return Loader


def read_metadata(path: Path) -> dict[str, dict]:
    import yaml

    data = yaml.load(path.read_text(encoding="utf-8", errors="replace"), Loader=_yaml_loader())
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BatchError(f"{path}: expected a mapping of submission folders to their metadata")
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in data.items()}


def _extract_zip(zip_path: Path, dest: Path) -> Path:
    marker = dest / ".extracted"
    if not marker.exists():
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        root = dest.resolve()
        with zipfile.ZipFile(zip_path) as zf:
            for info in zf.infolist():
                target = (dest / info.filename).resolve()
                if root != target and root not in target.parents:
                    continue  # a path that leaves the folder: skipped
                zf.extract(info, dest)
        marker.write_text(str(zip_path) + "\n")
    return dest


def find_export_root(path: Path) -> Path:
    """The folder holding submission_metadata.yml: ``path`` itself or one folder down."""
    if (path / METADATA_NAME).is_file():
        return path
    subdirs = [d for d in path.iterdir() if d.is_dir() and not d.name.startswith((".", "__MACOSX"))]
    with_meta = [d for d in subdirs if (d / METADATA_NAME).is_file()]
    if len(with_meta) == 1:
        return with_meta[0]
    if len(subdirs) == 1 and any(c.is_dir() and c.name.startswith("submission_") for c in subdirs[0].iterdir()):
        return subdirs[0]
    return path


def load_export(export: Path, work: Path | None = None) -> tuple[Path, list[Submission], list[str]]:
    """(export root, submissions sorted by folder, notes). A zip is extracted into ``work``."""
    export = Path(export)
    notes: list[str] = []
    if export.is_file() and zipfile.is_zipfile(export):
        if work is None:
            raise BatchError("a zipped export needs an output folder to extract into")
        export = _extract_zip(export, Path(work) / "export")
    if not export.is_dir():
        raise BatchError(f"export {export} does not exist (expected Gradescope's 'Download Submissions' "
                         "folder or zip)")
    root = find_export_root(export)
    meta_path = root / METADATA_NAME
    metadata: dict[str, dict] = {}
    if meta_path.is_file():
        try:
            metadata = read_metadata(meta_path)
        except BatchError:
            raise
        except Exception as exc:  # a YAML error: grade the folders, without names
            notes.append(f"{METADATA_NAME} could not be read ({type(exc).__name__}: {exc}); "
                         "graded without names")
    else:
        notes.append(f"no {METADATA_NAME} in {root}: graded without names")
    dirs = {d.name: d for d in root.iterdir()
            if d.is_dir() and not d.name.startswith((".", "__MACOSX"))}
    named = {n: d for n, d in dirs.items() if n.startswith("submission_")}
    folders = named if named else dirs
    subs = []
    for name in sorted(set(folders) | set(metadata)):
        path = folders.get(name)
        meta = metadata.get(name)
        subs.append(Submission(name, path, meta))
        if meta is None and metadata:
            notes.append(f"{name}: not in {METADATA_NAME}; graded without names")
        if path is None:
            notes.append(f"{name}: in {METADATA_NAME} but the export has no folder for it")
    return root, subs, notes


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise BatchError(f"--shard {text!r}: expected I/N with 0 <= I < N (e.g. 0/4)")
    return int(m.group(1)), int(m.group(2))


def select_shard(subs: list[Submission], shard: tuple[int, int] | None) -> list[Submission]:
    if shard is None:
        return subs
    i, n = shard
    return [s for k, s in enumerate(sorted(subs, key=lambda s: s.folder)) if k % n == i]


# --------------------------------------------------------------------------------------------
# GPUs and workers
# --------------------------------------------------------------------------------------------
def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
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


def plan_workers(gpus: list[str], requested: int | None) -> list[str | None]:
    """One slot per worker: the GPU it is pinned to (None: static grading, no GPU)."""
    if not gpus:
        return [None] * max(1, requested or 1)
    n = requested or len(gpus)
    return [gpus[k % len(gpus)] for k in range(max(1, n))]


# --------------------------------------------------------------------------------------------
# Grading one submission
# --------------------------------------------------------------------------------------------
@dataclass
class Options:
    rubric: Path = DEFAULT_RUBRIC
    use_gpu: bool = True
    stages: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    keep_outputs: bool = False


ChildCommand = Callable[[Submission, Path, Options], list[str]]


def child_command(sub: Submission, out: Path, opts: Options) -> list[str]:
    cmd = [sys.executable, str(RUN_LOCAL), str(sub.path), "--out", str(out), "--quiet",
           "--rubric", str(opts.rubric)]
    if not opts.use_gpu:
        cmd.append("--no-gpu")
    if opts.stages:
        cmd += ["--stages", opts.stages]
    if opts.keep_outputs:
        cmd.append("--keep-outputs")
    return cmd


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def grade_one(sub: Submission, subs_dir: Path, gpu: str | None, opts: Options,
              make_cmd: ChildCommand = child_command) -> dict:
    """Grade ``sub`` into ``subs_dir/<folder>/``; return its status record (never raises for the
    submission's or the child's failure)."""
    final = subs_dir / sub.folder
    partial = subs_dir / (sub.folder + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if gpu is not None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the same numbering as nvidia-smi
        env["CUDA_VISIBLE_DEVICES"] = gpu
    t0 = time.monotonic()
    proc = sandbox.run(make_cmd(sub, partial, opts), timeout_s=opts.timeout_s, cwd=str(REPO_ROOT),
                       env=env, output_limit=LOG_LIMIT)
    wall = time.monotonic() - t0
    (partial / "log.txt").write_text(
        f"$ {' '.join(proc.command)}\n# {proc.brief()}, {wall:.1f} s, GPU {gpu}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}\n", encoding="utf-8")
    results_path = partial / "results.json"
    if proc.timed_out:
        status = TIMED_OUT
        write_results(results_path, error_results(
            f"batch: grading {sub.folder} timed out after {opts.timeout_s:g} s and was stopped "
            f"(log: {final / 'log.txt'})", wall))
    elif proc.returncode == 0 and _read_json(results_path) is not None:
        status = GRADED
    else:
        status = USAGE_ERROR if proc.returncode == 2 else GRADER_ERROR
        if _read_json(results_path) is None:
            write_results(results_path, error_results(
                f"batch: the grader ended with {proc.brief()} and wrote no results.json\n\n"
                + (proc.stderr or proc.stdout)[-4000:], wall))
    results = _read_json(results_path) or {}
    record = {"folder": sub.folder, "status": status, "returncode": proc.returncode,
              "wall_s": round(wall, 2), "gpu": gpu, "score": results.get("score"),
              "finished": dt.datetime.now().isoformat(timespec="seconds")}
    (partial / STATUS_FILE).write_text(json.dumps(record, indent=1) + "\n")
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return record


def is_done(sub: Submission, subs_dir: Path, retry_failed: bool) -> bool:
    final = subs_dir / sub.folder
    if not (final / "results.json").is_file():
        return False
    if retry_failed:
        status = (_read_json(final / STATUS_FILE) or {}).get("status")
        return status not in FAILED_STATUSES
    return True


# --------------------------------------------------------------------------------------------
# grades.csv
# --------------------------------------------------------------------------------------------
def _item_key(test: dict) -> str:
    extra = test.get("extra_data") or {}
    if extra.get("stage") and extra.get("item"):
        return f"{extra['stage']}.{extra['item']}"
    return str(test.get("number") or test.get("name"))


def _leaderboard(folder_dir: Path, results: dict) -> list[dict]:
    if isinstance(results.get("leaderboard"), list):
        return results["leaderboard"]
    detail = _read_json(folder_dir / "grading.json")
    if not isinstance(detail, dict):
        return []
    from grader.outputs.leaderboard import leaderboard_entries

    return leaderboard_entries(detail, titles=_stage_titles())


_TITLES: dict[str, str] | None = None


def _stage_titles() -> dict[str, str]:
    global _TITLES
    if _TITLES is None:
        try:
            from grader.spec.rubric import load_rubric

            _TITLES = {st.id: st.title for st in load_rubric(DEFAULT_RUBRIC).stages}
        except Exception:
            _TITLES = {}
    return _TITLES


def csv_rows(subs: Iterable[Submission], subs_dir: Path) -> tuple[list[str], list[dict]]:
    """(columns, rows) for these submissions from their graded folders."""
    item_cols: list[str] = []
    board_cols: list[str] = []
    rows = []
    for sub in subs:
        people = sub.submitters()
        row: dict[str, Any] = {
            "submission_id": sub.submission_id, "folder": sub.folder,
            "names": "; ".join(p["name"] for p in people),
            "emails": "; ".join(p["email"] for p in people),
            "sids": "; ".join(p["sid"] for p in people),
            "created_at": sub.created_at(),
        }
        folder_dir = subs_dir / sub.folder
        if sub.path is None:
            row["status"] = MISSING_FOLDER
            rows.append(row)
            continue
        results = _read_json(folder_dir / "results.json")
        status = (_read_json(folder_dir / STATUS_FILE) or {}).get("status")
        if not isinstance(results, dict):
            row["status"] = "not_graded"
            rows.append(row)
            continue
        tests = [t for t in results.get("tests", []) if isinstance(t, dict)]
        row["status"] = status or GRADED
        row["total"] = results.get("score")
        row["max_total"] = round(sum(float(t.get("max_score") or 0) for t in tests), 4)
        for t in tests:
            if "autograder_error" in (t.get("tags") or []):
                continue
            key = _item_key(t)
            if key not in item_cols:
                item_cols.append(key)
            row[key] = t.get("score")
        for entry in _leaderboard(folder_dir, results):
            key = f"leaderboard: {entry.get('name')}"
            if key not in board_cols:
                board_cols.append(key)
            row[key] = entry.get("value")
        rows.append(row)
    return META_COLUMNS + item_cols + board_cols, rows


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    os.replace(tmp, path)


def merge(inputs: list[Path], out: Path) -> tuple[int, list[str]]:
    """Join grades.csv files (or batch output folders holding one) into ``out``.

    Columns: the union, in order of first appearance; rows: one per folder (a later input wins, with
    a warning). Returns (rows written, warnings)."""
    columns: list[str] = []
    rows: dict[str, dict] = {}
    warnings = []
    for inp in inputs:
        path = Path(inp) / "grades.csv" if Path(inp).is_dir() else Path(inp)
        if not path.is_file():
            warnings.append(f"{inp}: no grades.csv; skipped")
            continue
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for col in reader.fieldnames or []:
                if col not in columns:
                    columns.append(col)
            for row in reader:
                key = row.get("folder") or row.get("submission_id") or ""
                if key in rows and rows[key] != row:
                    warnings.append(f"{key}: in more than one input; the row from {path} is kept")
                rows[key] = row
    # Items before leaderboard columns, whatever order the shards met them in.
    meta = [c for c in META_COLUMNS if c in columns]
    rest = [c for c in columns if c not in META_COLUMNS]
    columns = meta + [c for c in rest if not c.startswith("leaderboard: ")] + \
        [c for c in rest if c.startswith("leaderboard: ")]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out, columns, [rows[k] for k in sorted(rows)])
    return len(rows), warnings


# --------------------------------------------------------------------------------------------
# The batch
# --------------------------------------------------------------------------------------------
@dataclass
class BatchSummary:
    out: Path
    total: int = 0
    graded: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    workers: list[str | None] = field(default_factory=list)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    csv: Path | None = None


def grade_export(export: Path, out: Path, *, workers: int | None = None, force: bool = False,
                 retry_failed: bool = False, opts: Options | None = None,
                 shard: tuple[int, int] | None = None, quiet: bool = False,
                 make_cmd: ChildCommand = child_command, gpus: list[str] | None = None,
                 log: Callable[[str], None] | None = None) -> BatchSummary:
    opts = opts or Options()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    subs_dir = out / "submissions"
    subs_dir.mkdir(exist_ok=True)
    root, subs, notes = load_export(Path(export), out)
    subs = select_shard(subs, shard)
    if gpus is None:
        gpus = visible_gpus() if opts.use_gpu else []
    if opts.use_gpu and not gpus:
        notes.append("no GPU visible: static grading (GPU items 'not evaluated')")
        opts = dataclasses.replace(opts, use_gpu=False)
    slots = plan_workers(gpus, workers)
    if gpus and len(slots) > len(gpus):
        notes.append(f"{len(slots)} workers share {len(gpus)} GPUs: their timings disturb each other")
    summary = BatchSummary(out=out, total=len(subs), workers=slots, notes=notes)
    todo = [s for s in subs if s.path is not None and (force or not is_done(s, subs_dir, retry_failed))]
    summary.missing = [s.folder for s in subs if s.path is None]
    summary.skipped = len([s for s in subs if s.path is not None]) - len(todo)

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True, quiet=quiet)
    if not console.is_terminal:  # logs (Slurm, CI): no squeezing into 80 columns
        console = Console(stderr=True, quiet=quiet, width=150)
    say = log or (lambda msg: console.print(msg, highlight=False))
    where = f"{len(gpus)} GPU(s) {', '.join(gpus)}" if gpus else "no GPU (static grading)"
    say(f"batch: {len(subs)} submissions in {root}" + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
        + f"; {len(todo)} to grade, {summary.skipped} already graded; {len(slots)} worker(s), {where}")
    for note in notes:
        say(f"batch: note: {note}")

    t0 = time.monotonic()
    free: queue.Queue = queue.Queue()
    for slot in slots:
        free.put(slot)

    def task(sub: Submission) -> dict:
        slot = free.get()
        try:
            return grade_one(sub, subs_dir, slot, opts, make_cmd)
        except Exception as exc:  # the batch's own failure for this one (disk full...): record it
            return {"folder": sub.folder, "status": GRADER_ERROR, "error": f"{type(exc).__name__}: {exc}",
                    "gpu": slot, "wall_s": 0.0}
        finally:
            free.put(slot)

    records: list[dict] = []
    progress = Progress(TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("eta"), TimeRemainingColumn(), console=console, disable=quiet)
    interrupted = False
    with progress:
        bar = progress.add_task("grading", total=len(todo))
        pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="batch")
        futures = {pool.submit(task, s): s for s in todo}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in done:
                    rec = fut.result()
                    records.append(rec)
                    progress.advance(bar)
                    gpu = f"GPU {rec.get('gpu')}" if rec.get("gpu") is not None else "CPU"
                    score = rec.get("score")
                    progress.console.print(
                        f"  {rec['folder']}: {rec['status']}"
                        + (f", {score:g} points" if isinstance(score, (int, float)) else "")
                        + f" ({rec.get('wall_s', 0):.1f} s, {gpu})", highlight=False)
        except KeyboardInterrupt:
            interrupted = True
            say("batch: interrupted; waiting for the running submissions (run again to resume)")
            for fut in futures:
                fut.cancel()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    summary.wall_s = time.monotonic() - t0
    summary.graded = sum(1 for r in records if r["status"] == GRADED)
    summary.failed = sorted(r["folder"] for r in records if r["status"] != GRADED)
    columns, rows = csv_rows(subs, subs_dir)
    summary.csv = out / "grades.csv"
    write_csv(summary.csv, columns, rows)
    (out / "batch.json").write_text(json.dumps({
        "export": str(root), "shard": list(shard) if shard else None, "submissions": len(subs),
        "graded_now": len(records), "skipped": summary.skipped, "failed": summary.failed,
        "missing_folders": summary.missing, "workers": len(slots), "gpus": gpus,
        "use_gpu": opts.use_gpu, "wall_s": round(summary.wall_s, 2),
        "interrupted": interrupted, "notes": notes, "records": sorted(records, key=lambda r: r["folder"]),
    }, indent=1, default=str) + "\n")
    say(f"batch: {len(records)} graded in {summary.wall_s:.1f} s ({summary.graded} ok, "
        f"{len(summary.failed)} failed: {', '.join(summary.failed) or 'none'}); {summary.skipped} skipped; "
        f"grades in {summary.csv}")
    if interrupted:
        raise KeyboardInterrupt
    return summary


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------
def _grade_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("export", help="Gradescope 'Download Submissions' export: the zip or its folder")
    p.add_argument("--out", default="batch-out", help="output folder (default: %(default)s)")
    p.add_argument("--workers", type=int, help="parallel gradings (default: one per visible GPU; 1 without)")
    p.add_argument("--force", action="store_true", help="re-grade submissions that already have results")
    p.add_argument("--retry-failed", action="store_true",
                   help="re-grade only the submissions whose grading failed or timed out")
    p.add_argument("--no-gpu", action="store_true", help="grade statically even if GPUs are visible")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's)")
    p.add_argument("--stages", help="comma-separated stage ids to grade (default: all)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="time limit per submission in seconds (default: %(default)g)")
    p.add_argument("--shard", help="grade only slice I of N (I/N, 0-based; Slurm array jobs)")
    p.add_argument("--keep-outputs", action="store_true", help="keep the kernels' output matrices")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m grader.deploy.batch",
                                description="Grade a Gradescope export; merge shards' grades.csv.")
    sub = p.add_subparsers(dest="cmd", required=True)
    _grade_parser(sub.add_parser("grade", help="grade every submission of an export"))
    m = sub.add_parser("merge", help="merge grades.csv files (or batch output folders) into one CSV")
    m.add_argument("inputs", nargs="+", help="grades.csv files or batch output folders")
    m.add_argument("--out", required=True, help="the merged CSV")
    args = p.parse_args(argv)
    try:
        if args.cmd == "merge":
            n, warnings = merge([Path(x) for x in args.inputs], Path(args.out))
            for w in warnings:
                print(f"merge: warning: {w}", file=sys.stderr)
            print(f"merge: {n} submissions -> {args.out}", file=sys.stderr)
            return 0
        if args.workers is not None and args.workers < 1:
            raise BatchError(f"--workers {args.workers}: at least 1")
        if args.timeout <= 0:
            raise BatchError(f"--timeout {args.timeout:g}: a positive number of seconds")
        from grader.spec.rubric import load_rubric

        rubric = load_rubric(args.rubric)  # a bad rubric stops here, not in every child
        if args.stages:
            known = [st.id for st in rubric.stages] + [k for k in rubric.extra if not k.endswith("_config")]
            unknown = [s.strip() for s in args.stages.split(",") if s.strip() and s.strip() not in known]
            if unknown:
                raise BatchError(f"--stages: unknown stage {unknown[0]!r}; known: {', '.join(known)}")
        opts = Options(rubric=Path(args.rubric).resolve(), use_gpu=not args.no_gpu, stages=args.stages,
                       timeout_s=args.timeout, keep_outputs=args.keep_outputs)
        grade_export(Path(args.export), Path(args.out), workers=args.workers, force=args.force,
                     retry_failed=args.retry_failed, opts=opts, shard=parse_shard(args.shard),
                     quiet=args.quiet)
        return 0
    except KeyboardInterrupt:
        return 130
    except BatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a rubric error or the batch's own bug
        from grader.errors import ConfigError

        if isinstance(exc, ConfigError):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        import traceback

        traceback.print_exc()
        return 3


if __name__ == "__main__":
    sys.exit(main())
