"""Where one tool (nvcc, cuobjdump, ncu, ...) is, or why it is not there. Built by grader/compile/tool_search.py."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class Tool:
    """Where one tool is, or why it is not there.

    ``source`` is ``"system"`` (a toolkit install, PATH, or an explicit
    ``GRADER_*`` path) or ``"pip"`` (inside an NVIDIA wheel under
    ``site-packages/nvidia``). ``how`` says which rule found it. ``problems``
    lists what is wrong with a found tool (missing headers, no host compiler,
    no nvdisasm); ``ok`` is true only when the tool is found and has none.
    """

    name: str
    path: str | None
    version: str | None = None
    source: str | None = None
    how: str = ""
    reason: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)
    # Extra compiler flags / environment the caller must pass when running the tool.
    include_dirs: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict)
    # nvcc only: the host compiler nvcc will call (it needs one even for -cubin).
    host_compiler: str | None = None
    host_compiler_version: str | None = None

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def ok(self) -> bool:
        return self.path is not None and not self.problems

    def include_flags(self) -> list[str]:
        return [f"-I{d}" for d in self.include_dirs]

    def summary(self) -> str:
        """One line for logs and for the TA's setup report."""
        if self.path is None:
            return f"{self.name}: not found ({self.reason})"
        line = f"{self.name}: {self.path}"
        if self.version:
            line += f" (version {self.version}, {self.source})"
        else:
            line += f" ({self.source}; version unknown)"
        if self.host_compiler:
            line += f"; host compiler {self.host_compiler}"
            if self.host_compiler_version:
                line += f" {self.host_compiler_version}"
        if self.problems:
            line += "; PROBLEMS: " + "; ".join(self.problems)
        return line

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return d
