"""A rubric key path (``rubric.yaml.stages[4].items[4].min``) as an editor reads it: the YAML line and
the stage and item ids (``rubric.yaml line 263: stage blocktiling_2d, item speed: min``).

The readers name every problem by key path (grader/rubric/reader.py), which stays exact and cheap; only
when a rubric is refused is its text composed again (PyYAML's node tree, whose marks hold the lines)
and the path walked down it. Composing costs what the ``yaml.safe_load`` before it cost (the same
text, already accepted), and the walk is linear in the path and in the keys of the mappings it passes.
"""
from __future__ import annotations

import re

import yaml

from grader.rubric.errors import RubricError

_INDEX = re.compile(r"\[(\d+)\]")

# The loader of the rubric's YAML text and of its calibration entries: libyaml's where PyYAML has it (its wheels
# do; 4 ms against 35 ms for rubric.yaml, which every grading and most test modules load, and 0.5 ms against 4 ms
# an entry), else PyYAML's own; the same safe constructor and resolver either way, so the same values.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _key_step(node: yaml.MappingNode, rest: str) -> tuple[str, yaml.Node, yaml.Node] | None:
    """The longest key of ``node`` that ``rest`` (".key...") starts with: keys may hold dots (``9.0``)."""
    best = None
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        key = key_node.value
        head = "." + key
        if rest.startswith(head) and rest[len(head):len(head) + 1] in ("", ".", "[") and (
                best is None or len(key) > len(best[0])):
            best = (key, key_node, value_node)
    return best


def _label(parent_key: str, node: yaml.Node) -> str | None:
    """``stage naive`` for an element of ``stages`` with an ``id``; None for an element without one."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == "id" and isinstance(value_node, yaml.ScalarNode):
            return f"{parent_key.removesuffix('s')} {value_node.value}"
    return None


def describe_path(text: str, source: str, path: str) -> str | None:
    """``path`` (starting with ``source``) as ``SOURCE line N: stage X, item Y: rest``; None when the text
    cannot be composed or the path does not start at its root."""
    if not path.startswith(source):
        return None
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    rest, line, labels, tail, parent = path[len(source):], node.start_mark.line + 1, [], "", ""
    while rest:
        m = _INDEX.match(rest)
        if m and isinstance(node, yaml.SequenceNode) and int(m.group(1)) < len(node.value):
            node = node.value[int(m.group(1))]
            line = node.start_mark.line + 1
            label = _label(parent, node)
            if label:
                labels.append(label)
                tail = ""
            else:
                tail += m.group(0)
            rest = rest[m.end():]
            continue
        step = _key_step(node, rest) if isinstance(node, yaml.MappingNode) else None
        if step is None:
            break  # a key that is not there (``min: is missing``): the line of the mapping that lacks it
        key, key_node, node = step
        line, parent = key_node.start_mark.line + 1, key
        tail = f"{tail}.{key}" if tail else key
        rest = rest[1 + len(key):]
    rest = rest.lstrip(".")
    tail = f"{tail}.{rest}" if tail and rest else tail or rest
    named = ", ".join(labels)
    named = f"{named}: {tail}" if named and tail else named or tail
    return f"{source} line {line}" + (f": {named}" if named else "")


def located(exc: RubricError, text: str, source: str) -> RubricError:
    """``exc`` with its key path told by line and ids (unchanged when the path cannot be walked)."""
    where = describe_path(text, source, exc.where)
    return exc if where is None else RubricError(where, exc.problem, exc.expected)
