"""Every persisted record: what grading.json, results.json and the child protocol hold, as plain typed
dataclasses and enums, written and read by the one codec (grader/records.py).

On the ground floor (pyproject.toml's floors): the mechanisms that build these records (compile, profile,
sandbox, the tool search, the rubric, the children, outputs) import them from here, so the record of one
grading (grader/grading.py) draws on no mechanism. protocol.py is a runtime file (grader/children/__init__.py:
RUNTIME_FILES) and imports only the standard library; this file imports nothing, so the children may import it.
"""
