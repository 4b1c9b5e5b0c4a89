"""The class's similarity and provenance report (``python -m grader similarity``), for instructors, no GPU.

Every pair of submissions, stage by stage, and every submission against reference folders, at two
levels: the stage's source with comments, whitespace and names abstracted (copydetect's winnowing),
and the SASS of the stage's kernel with registers, constants and addresses abstracted. A score is a
lead for a person to read, never a verdict: the report says so (report.py: MEANING).

| module | concern |
|---|---|
| `sass_tokens.py` | one kernel's SASS -> abstracted instruction tokens (pure) |
| `fingerprint.py` | copydetect's fingerprints of a source or of a token list, a pair's score and shared fragments |
| `collect.py` | the class (an export, a batch's output, a folder of submissions) and the reference folders |
| `build.py` | each stage's file compiled (the grader's guarded compile, fenced) and its kernel's SASS dumped |
| `report.py` | the rows (similarity.json), similarity.md and similarity.html |
| `cli.py` | the command's arguments and entry point |
| `defaults.py` | the report's defaults, read by the parser without importing copydetect |
"""
