"""Which files a student's source may pull in with ``#include``, checked twice.

1. :func:`literal_problem`, a cheap first pass over the text of every copied file, refuses an
   absolute path, a ``..`` and a computed include (``#include MACRO``) with a message that names
   the line. It undoes line splices and comments and knows the ``%:`` digraph and ``#import``
   first, but it is only there for clear messages: it is not what makes the check sound.
2. :func:`outside_dependencies` asks the preprocessor. nvcc's dependency listing (``-M``, and
   ``-MD`` during the compile itself) names every file the host and device passes read, however
   the directive was spelled; any that is not inside the build folder or one of the toolchain's
   and host compiler's include folders (:func:`header_dirs`) is refused.

When the dependency run fails, its output may quote a file it read; :func:`diagnostic_paths`
names the files its diagnostics point into, so the caller can refuse without echoing any of it.
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from grader.compile.nvcc_tree import include_dirs_of, toolkit_root
from grader.compile.tool_search import run_version
from grader.evidence.tools import Tool
from grader.untrusted.quote import quote_code

_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(include_next|include|import)\b[ \t]*(.*)$", re.M)
_LITERAL = re.compile(r'^(<[^>]*>|"[^"]*")')
# Paths whose meaning depends on the process that opens them (its fds, its cwd, its root).
_PROCESS_RELATIVE = ("/proc/", "/dev/", "/sys/")
# A diagnostic's location: gcc (`file:12:3: error:`, `In file included from file:3,`) and EDG
# (`file(12): error:`), the two formats nvcc passes on.
_LOCATIONS = (
    re.compile(r"^(?:In file included from|\s+from)\s+(.+?):\d+[:,]?\s*$"),
    re.compile(r"^(\S.*?):\d+(?::\d+)?: (?:fatal error|error|warning|note):"),
    re.compile(r'^"?(\S.*?)"?\(\d+\): (?:error|warning|remark|catastrophic error)'),
)


def _join_splices(text: str) -> str:
    """Join backslash-newline splices; the newlines they removed follow the joined line, so every
    later line keeps its number (a directive is reported at its first physical line)."""
    out, owed = [], 0
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.endswith("\\"):
            out.append(line[:-1])
            owed += 1
        else:
            out.append(line + "\n" * (owed + 1))
            owed = 0
    return "".join(out)[:-1]


# A string or character literal (to its closing quote, or to the end of its line), a // comment, or a
# /* comment (to its end, or to the end of the text); everything between them is copied as it is.
_LEXEME = re.compile(r"""(?P<str>(?P<q>["'])(?:\\.|(?!(?P=q))[^\\\n])*(?:(?P=q)|\n)?)|(?P<line>//[^\n]*)|(?P<block>/\*.*?(?:\*/|\Z))""",
                     re.S)


def _without_comments(text: str) -> str:
    """The text as the preprocessor's early phases see it: line splices joined, comments
    replaced by a space (string and character literals kept), line numbers unchanged.
    One regular-expression pass: linear, and fast on a 1 MiB file."""
    def replace(m: re.Match[str]) -> str:
        if m.group("str") is not None:
            return m.group(0)
        if m.group("line") is not None:
            return " "
        return " " + "\n" * m.group(0).count("\n")  # keeps line numbers of what follows

    return _LEXEME.sub(replace, _join_splices(text))


def literal_problem(source: bytes, name: str) -> str:
    """Why an ``#include`` in ``source`` (the file ``name``) is refused by the first pass, or ''.

    Only <system headers> and "files next to it" may be included: an absolute path or one with
    '..' could read the grader's or the solutions' files (and echo them in an error message), and
    a computed include (``#include MACRO``) hides where it points.
    """
    return scan_includes(source, name)[0]


def scan_includes(source: bytes, name: str) -> tuple[str, list[str]]:
    """(:func:`literal_problem`'s answer, the names the file includes, in order). The names are
    what a build may read next to it: a file nothing reaches this way is read by no build."""
    text = _without_comments(source.decode("utf-8", "replace"))
    targets: list[str] = []
    # Line numbers counted from the previous directive on, so the scan stays linear in the text
    # however many directives it holds (1 MiB of `#import<>` lines is ~100,000 of them).
    line, counted = 1, 0
    for m in _DIRECTIVE.finditer(text):
        line += text.count("\n", counted, m.start())
        counted = m.start()
        directive, target = m.group(1), m.group(2).strip()
        inner = _LITERAL.match(target)
        if not inner:
            return (f"{name}:{line}: {quote_code(f'#{directive} {target}')} is not allowed: include a `<header>` or a "
                    '"file" next to it by its literal name'), targets
        path = inner.group(1)[1:-1]
        if path.startswith("/") or ".." in path.split("/") or "\\" in path:
            return (f"{name}:{line}: {quote_code(f'#{directive} {inner.group(1)}')} is not allowed: only system headers "
                    "and files in your submission's own folder may be included"), targets
        targets.append(path)
    return "", targets


def parse_make_deps(text: str) -> list[str]:
    """The prerequisites of a make rule as nvcc/gcc write them (``-M``, ``-MD``), in order."""
    deps: list[str] = []
    for rule in re.sub(r"\\\r?\n", " ", text).splitlines():  # one rule per logical line
        tokens = [t for t in re.split(r"(?<!\\)\s+", rule) if t]
        ends = [i for i, t in enumerate(tokens) if t.endswith(":")]  # "naive.o:" or a lone ":"
        if not ends:
            continue
        for token in tokens[ends[0] + 1:]:
            deps.append(token.replace("\\ ", " ").replace("\\#", "#").replace("$$", "$"))
    return list(dict.fromkeys(deps))


def _host_search_dirs(compiler: str) -> list[str]:
    """The host compiler's own ``#include <...>`` search list (``-xc++ -E -v``)."""
    out, _err = run_version([compiler, "-xc++", "-E", "-v", "-"])
    dirs, inside = [], False
    for line in (out or "").splitlines():
        if line.startswith("#include") and "search starts here" in line:
            inside = True
        elif line.startswith("End of search list"):
            inside = False
        elif inside and line.startswith(" "):
            dirs.append(line.strip().split(" (")[0])
    return dirs


@functools.lru_cache(maxsize=8)
def _header_dirs(nvcc_path: str, compiler: str, extra: tuple[str, ...]) -> tuple[str, ...]:
    root = toolkit_root(nvcc_path) or os.path.dirname(os.path.dirname(os.path.realpath(nvcc_path)))
    dirs = include_dirs_of(root) + list(extra) + _host_search_dirs(compiler)
    real = [os.path.realpath(d) for d in dirs if os.path.isdir(d)]
    return tuple(dict.fromkeys(real))


def header_dirs(nvcc: Tool) -> tuple[str, ...]:
    """Folders (real paths) a student's source may read headers from: the toolkit's include
    folders, the extra ones nvcc is given, and the host compiler's system folders."""
    assert nvcc.path is not None
    return _header_dirs(nvcc.path, nvcc.host_compiler or "gcc", tuple(nvcc.include_dirs))


def _inside(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def outside_dependencies(deps: Sequence[str], build: Path, allowed: Sequence[str]) -> list[tuple[str, str]]:
    """``(as listed, real path)`` of every dependency outside ``build`` and the ``allowed`` folders.

    Relative paths are the compiler's, so they resolve against ``build`` (its working folder).
    A path under /proc, /dev or /sys is refused as listed: it means something else in the
    compiler's process than in this one.
    """
    base = os.path.realpath(build)
    bad = []
    for dep in deps:
        listed = os.path.normpath(os.path.join(base, dep))
        if listed.startswith(_PROCESS_RELATIVE):
            bad.append((dep, listed))
            continue
        real = os.path.realpath(listed)
        if not _inside(real, [base, *allowed]):
            bad.append((dep, real))
    return bad


def diagnostic_paths(output: str) -> list[str]:
    """The files the compiler's diagnostics point into (as written), in order."""
    paths: list[str] = []
    for line in output.splitlines():
        for pattern in _LOCATIONS:
            m = pattern.match(line)
            if m:
                paths.append(m.group(1).strip())
                break
    return list(dict.fromkeys(paths))
