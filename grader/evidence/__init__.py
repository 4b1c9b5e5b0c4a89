"""The evidence of a grading: the records the mechanisms (compile, profile, sandbox, the rubric's limits and
peaks, the tool search) return and grading.json keeps, as plain typed dataclasses and enums.

Low in the house (pyproject.toml's floors): the mechanisms import their records from here, and
grader/grading.py, the record of one grading, draws on these records without drawing on the mechanisms.
Written and read by the one codec, grader/records.py.
"""
