"""Child process: describe the GPU, or say why there is none.

``python -m grader.children probe SPEC.json RESULT.json`` (the spec is empty). The grading
process never creates a CUDA context itself; it asks this child instead, so a broken driver
or a missing CuPy costs one failed child, not the grader.
"""
from __future__ import annotations

import glob
import shutil
from pathlib import Path

from grader.children.protocol import write_result
from grader.evidence.protocol import ProbeResult, ProbeSpec

# cudaDeviceAttr values (stable across CUDA 12 and 13; CUDA 13 dropped clockRate
# from cudaDeviceProp, so attributes are read one by one).
_ATTR_CLOCK_KHZ = 13
_ATTR_SM_COUNT = 16
_ATTR_L2_BYTES = 38
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76


def nvidia_gpu_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU at all (its device files, or nvidia-smi): only then is a
    CuPy that does not import worth a word."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None


def describe() -> ProbeResult:
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA
        if not nvidia_gpu_visible():
            return ProbeResult(ok=False, reason="no CUDA device (this machine has no NVIDIA GPU)")
        return ProbeResult(ok=False, reason=f"no CUDA device (CuPy is not usable here: {type(exc).__name__}: {exc})")
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:  # cudaErrorInsufficientDriver / NoDevice on CPU-only machines
        return ProbeResult(ok=False, reason=f"no CUDA device ({exc})")
    if count < 1:
        return ProbeResult(ok=False, reason="no CUDA device")
    dev = runtime.getDevice()
    props = runtime.getDeviceProperties(dev)
    name = props.get("name", b"")
    name = name.decode() if isinstance(name, bytes) else str(name)

    def attr(a: int) -> int:
        return int(runtime.deviceGetAttribute(a, dev))

    return ProbeResult(ok=True, index=int(dev), count=int(count), name=name,
                       cc=[attr(_ATTR_CC_MAJOR), attr(_ATTR_CC_MINOR)], sms=attr(_ATTR_SM_COUNT),
                       clock_khz=attr(_ATTR_CLOCK_KHZ), l2_bytes=attr(_ATTR_L2_BYTES),
                       total_mem=int(props.get("totalGlobalMem", 0)), runtime_version=int(runtime.runtimeGetVersion()),
                       driver_version=int(runtime.driverGetVersion()), cupy_version=str(cupy.__version__))


def run(spec: ProbeSpec, result: Path) -> int:
    write_result(result, describe())
    return 0
