"""Student-controlled text: a bounded YAML loader and quoting for Markdown feedback.

- :mod:`.quote`: :func:`~.quote.quote_code` shows a student's text as an inline code span
  (never rendered, trimmed); :func:`~.quote.show_value` does the same for any value.
- :mod:`.yaml_load`: :func:`~.yaml_load.load_yaml` reads a student's YAML with caps on size,
  nesting, values, scalar length and number magnitude; it never raises.
"""
