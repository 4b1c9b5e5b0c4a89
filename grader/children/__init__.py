"""The grader's child processes: ``python -m grader.children MODE SPEC.json RESULT.json``.

Modes (one module each): ``probe`` (describe the GPU), ``stage`` (run one stage's kernel;
student code), ``check`` (float64 references; trusted), ``profile`` (launch each kernel once
under ncu), ``sanitize`` (launch each kernel once under compute-sanitizer, through the CUDA
driver alone: :mod:`grader.children.driver`, no CuPy), ``occupancy`` (the grader's occupancy
measurements), ``warm`` (compile CuPy's own kernels once, into the cache every other child's
starts as a copy of; trusted).
:mod:`grader.children.protocol` is the protocol; :mod:`grader.sandbox.launch` starts a child
from the grading process (it is not a runtime file: children never import it).
"""

# The files (relative to the grader package) a child process imports, and all of them: children
# import nothing else of the grader (no rubric, no yaml; grader/records.py, the records' JSON codec, and
# grader/evidence/protocol.py, the protocol's records, are theirs too), so the sandbox shows exactly these in a
# read-only runtime folder (grader.sandbox.fence.runtime_folder) and the grader's source stays hidden.
# tests/test_children.py checks that the list is closed under the children's imports.
RUNTIME_FILES: tuple[str, ...] = (
    "__init__.py",
    "records.py",
    "evidence/__init__.py",
    "evidence/protocol.py",
    "children/__init__.py",
    "children/__main__.py",
    "children/protocol.py",
    "children/probe.py",
    "children/stage.py",
    "children/check.py",
    "children/profile.py",
    "children/sanitize.py",
    "children/driver.py",
    "children/tma.py",
    "children/occupancy.py",
    "children/warm.py",
    "children/inputs.py",
    "children/numerics.py",
)
