"""Student-controlled text: a bounded YAML loader, quoting for Markdown feedback, safe CSV cells.

- :mod:`.quote`: :func:`~.quote.quote_code` shows a student's text as an inline code span
  (never rendered, trimmed); :func:`~.quote.show_value` does the same for any value.
- :mod:`.cells`: :func:`~.cells.safe_cell` keeps a CSV cell from running as a spreadsheet formula
  (grades.csv, tokens.csv, ``serve tokens list``).
- :mod:`.yaml_load`: :func:`~.yaml_load.load_yaml` reads a student's YAML with caps on size,
  nesting, values, scalar length and number magnitude; it never raises.
"""
