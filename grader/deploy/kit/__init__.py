"""The student kit: what students get (build.py: the zip, never solutions/ or tests/) and the quick
well-formedness check they run in it (check.py: ``python -m grader check``; checks.py: what it checks)."""
