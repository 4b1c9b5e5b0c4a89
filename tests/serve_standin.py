"""The stand-in grade command for the service's tests and soak run (tests/standin_grade.py), and a
service process that may start unhealthy. Kept apart so the service tests share one stand-in."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.serve_helpers import ROOT, ServiceProcess

# The service's environment for stand-in gradings (grader/serve/worker.py: GRADE_COMMAND_ENV).
STANDIN = {"GRADER_SERVE_GRADE_COMMAND": f"{sys.executable} {ROOT / 'tests' / 'standin_grade.py'}",
           "STANDIN_GRADE_DELAY_S": "0.3"}


class AnyHealth(ServiceProcess):
    """A service that may start unhealthy (a full disk): started once /healthz answers at all."""

    def start(self, timeout_s: float = 60.0) -> ServiceProcess:
        cmd = [sys.executable, "-m", "grader", "serve", "--no-gpu", "--data", str(self.data), "--host", "127.0.0.1",
               "--port", str(self.port), *self.args]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the service exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                httpx.get(self.url + "/healthz", timeout=2)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        pytest.fail(f"the service did not answer /healthz:\n{self.log_text()}")
