"""A service process that may start unhealthy (a full disk), for the availability tests."""
from __future__ import annotations

from pathlib import Path

import httpx

from tests.serve_helpers import ServiceProcess


class AnyHealth(ServiceProcess):
    """A service that may start unhealthy (a full disk): started once /healthz answers at all; every stage."""

    def __init__(self, data: Path, *args: str, **kwargs) -> None:
        super().__init__(data, *args, stages="", **kwargs)

    def ready(self, health: httpx.Response) -> bool:
        return True
