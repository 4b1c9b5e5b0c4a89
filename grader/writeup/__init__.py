"""The written report: its rubric section, a pure parser, and the checks against the grader's measurements.

- :mod:`.config`: the ``report:`` section of rubric.yaml -> :class:`~.config.ReportConfig`.
- :mod:`.parse`: Markdown -> sections, metric citations, numbers, tables (pure).
- :mod:`.tables`: the two results tables: completeness and arithmetic (pure).
- :mod:`.run`: :func:`~.run.grade_report_submission`, called by grader/pipeline.py.
"""
