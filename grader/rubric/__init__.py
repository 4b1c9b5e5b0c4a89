"""grader.rubric: what is graded, from rubric.yaml.

- :mod:`.rubric`: load and validate rubric.yaml -> :class:`.types.Rubric` (every section, once).
- :mod:`.reader`: the one reader every section is read with (typed keys, key-path errors).
- :mod:`.types`: the rubric's records (Rubric, Stage, Launch, Bench, ...).
- :mod:`.items`: :class:`.items.Item`, the one item type, and the vocabulary (VISIBILITIES, KINDS).
- :mod:`.expr`: the expression language of ``ncu`` items and the report's derived names.
- :mod:`.peaks`: the FP32 and FP16 Tensor Core ceilings of a device.
"""
