"""The written report: its rubric section, a pure parser, and the checks against the grader's measurements.

- :mod:`.config`: the ``report:`` section of rubric.yaml -> :class:`~.config.ReportConfig`.
- :mod:`.markdown`: Markdown -> sections, tables, code spans, prose words (markdown-it-py; pure, linear).
- :mod:`.parse`: sections -> metric citations and numbers; stage names in headings and cells (pure).
- :mod:`.tables`: the two results tables: completeness and arithmetic (pure).
- :mod:`.run`: :func:`~.run.grade_report_submission`, called by grader/pipeline.py.
"""
