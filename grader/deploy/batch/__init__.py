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
from grader.deploy.batch.plan import (
    known_times,
    longest_first,
    parse_shard,
    plan_workers,
    require_sandbox,
    select_shard,
    visible_gpus,
)
from grader.deploy.batch.pool import Options, child_command, grade_one
from grader.deploy.batch.run import BatchSummary, grade_export
from grader.deploy.batch.stale import GradedBy, Why, why_grade
from grader.outputs.grades_csv import (
    FAILED_STATUSES,
    META_COLUMNS,
    RowStatus,
    automatic_points,
    csv_rows,
    merge,
    write_csv,
)
from grader.untrusted.cells import safe_cell
from grader.untrusted.export import BatchError, Submission, find_export_root, load_export, read_metadata

__all__ = ["BatchError", "BatchSummary", "FAILED_STATUSES", "META_COLUMNS", "GradedBy", "Options", "RowStatus",
           "Submission", "Why", "automatic_points", "child_command", "csv_rows", "find_export_root", "grade_export",
           "grade_one", "known_times", "load_export", "longest_first", "merge", "parse_shard", "plan_workers",
           "read_metadata", "require_sandbox", "safe_cell", "select_shard", "visible_gpus", "why_grade",
           "write_csv"]
