"""Fake cupy.cuda.runtime: one H200."""
from __future__ import annotations


def getDevice():
    return 0


def getDeviceProperties(dev):
    from . import config
    if config().get("no_device"):
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    return {"name": b"NVIDIA H200", "major": 9, "minor": 0, "multiProcessorCount": 132, "warpSize": 32,
            "maxThreadsPerMultiProcessor": 2048, "maxBlocksPerMultiProcessor": 32,
            "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 233472,
            "sharedMemPerBlockOptin": 232448, "reservedSharedMemPerBlock": 1024}


# What grader.children.probe asks (so the whole CLI can run on the stand-in).
_ATTRS = {13: 1980000, 16: 132, 38: 60 * 1024 * 1024, 75: 9, 76: 0}


def getDeviceCount():
    from . import config
    return 0 if config().get("no_device") else 1


def deviceGetAttribute(attr, dev):
    return _ATTRS.get(attr, 0)


def driverGetVersion():
    return 13000


def runtimeGetVersion():
    return 13000
