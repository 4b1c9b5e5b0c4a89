"""Start a child from a spec in its JSON form, as stored files and older tests write it."""
from __future__ import annotations

from typing import Any

from grader.children.protocol import BY_NAME
from grader.records import from_jsonable, to_jsonable
from grader.sandbox.launch import ChildResult, launch


def launch_json(mode: str, spec: dict, *args: Any, **kwargs: Any) -> tuple[ChildResult, dict | None]:
    """launch() with ``spec`` read into the mode's spec record; (the child's result, that result's JSON form)."""
    m = BY_NAME[mode]
    got = launch(m, from_jsonable(m.spec, spec), *args, **kwargs)
    return got, None if got.result is None else to_jsonable(got.result)
