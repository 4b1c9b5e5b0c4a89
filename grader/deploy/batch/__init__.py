"""Grade a whole Gradescope export: two workers per visible GPU sharing its lock, resumable and never stale, one CSV.

    python -m grader batch EXPORT [--out DIR] [--workers N] [--per-gpu K] [--force] [--no-gpu]
                                  [--stages a,b] [--timeout S] [--shard I/N] [--times-from DIR]
                                  [--trusted-submissions]
    python -m grader merge OUT1 OUT2 ... --out grades.csv
    (the same: python grader/run_local.py EXPORT --batch ...; python -m grader.deploy.batch grade|merge ...)

EXPORT is Gradescope's "Download Submissions" export (the zip or its unpacked folder): a
``submission_metadata.yml`` at its root and one folder ``submission_<id>/`` per submission.

- :mod:`.export`: the metadata and the folders; a zipped export is extracted safely once (no link,
  no ``..``, no zip bomb); an entry left out costs only the row of the submission it belongs to.
- :mod:`.plan`: shards (``--shard I/N``: every N-th folder, for Slurm array jobs,
  tools/slurm_batch.sbatch), the visible GPUs, two workers per GPU (``--per-gpu``), the order (the
  longest earlier gradings first) and the sandbox check: where ``grader.sandbox.guard.mode()`` says
  students' code would run unfenced, the batch refuses unless ``--trusted-submissions``.
- :mod:`.stale`: what to grade. Resumable: a submission already graded is kept unless its grading is
  stale (another rubric, another grader version, other stages, or no GPU while this batch has one),
  ``--force`` (all) or ``--retry-failed`` (the failed ones); each re-grading says why.
- :mod:`.pool`: one child ``python -m grader grade`` per submission under ``--timeout`` (default
  3600 s), pinned to its worker's GPU and sharing that GPU's lock with the other worker on it (one
  uses the GPU while the other compiles); a crash or a hang costs only its own row. Each grading
  goes into ``<folder>.partial/`` and is renamed when done.
- :mod:`.table`: ``OUT/grades.csv`` (every cell safe against formula injection; "not evaluated"
  never written as 0) and ``merge``.
- :mod:`.run`: :func:`grade_export`, the whole run (also ``OUT/batch.json``: workers, GPUs, wall time,
  each GPU's busy share, what was re-graded and why).
- :mod:`.cli`: the command line, whose arguments ``python -m grader`` attaches too.
"""
# Its names are imported when first used (PEP 562), so that ``python -m grader.deploy.batch`` imports nothing
# before its set-up check (grader/setup_check.py).
_WHERE = {
    **dict.fromkeys(("known_times", "longest_first", "parse_shard", "plan_workers", "require_sandbox",
                     "select_shard", "visible_gpus"), "grader.deploy.batch.plan"),
    **dict.fromkeys(("Options", "child_command", "grade_one"), "grader.deploy.batch.pool"),
    **dict.fromkeys(("BatchSummary", "grade_export"), "grader.deploy.batch.run"),
    **dict.fromkeys(("GradedBy", "Why", "why_grade"), "grader.deploy.batch.stale"),
    **dict.fromkeys(("FAILED_STATUSES", "META_COLUMNS", "RowStatus", "automatic_points", "csv_rows", "merge",
                     "write_csv"), "grader.outputs.grades_csv"),
    "safe_cell": "grader.untrusted.cells",
    **dict.fromkeys(("BatchError", "Submission", "find_export_root", "load_export", "read_metadata"),
                    "grader.untrusted.export"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(_WHERE[name]), name)
