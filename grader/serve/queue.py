"""Dispatching job ids through huey: SqliteHuey on one host, PriorityRedisHuey when hosts share a queue.

huey carries only a job id; the job store (grader/serve/store.py) decides whether it still needs
grading, so a duplicate dispatch is harmless and a lost one is repaired by dispatching again
(:func:`grader.serve.worker.reap`). huey's priority is the job's ``order``: Gradescope before
self-checks, then the oldest first, the same order the store reports positions in.

huey pickles its messages; :class:`SafeSerializer` unpickles only huey's own message record, so a
task put into a shared Redis by someone else cannot run code in a worker.
"""
from __future__ import annotations

import datetime as dt
import io
import pickle
from collections.abc import Callable

from huey import PriorityRedisHuey, SqliteHuey
from huey.api import Huey
from huey.serializer import Serializer

from grader.serve.settings import Settings
from grader.serve.store import Job

QUEUE_FILE = "queue.sqlite"
TASK_NAME = "grade_job"
_ALLOWED = {("huey.registry", "Message"), ("datetime", "datetime"), ("datetime", "timedelta"),
            ("datetime", "timezone"), ("collections", "OrderedDict")}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"queue message refers to {module}.{name}, which is not allowed")
        return super().find_class(module, name)


class SafeSerializer(Serializer):
    def _deserialize(self, data: bytes):
        return _Unpickler(io.BytesIO(data)).load()


class JobQueue:
    def __init__(self, settings: Settings):
        self.kind = "redis" if settings.redis_url else "sqlite"
        self.huey: Huey
        if settings.redis_url:
            self.huey = PriorityRedisHuey("grader", url=settings.redis_url, results=False, utc=True,
                                          serializer=SafeSerializer(), blocking=True, read_timeout=1)
        else:
            settings.data.mkdir(parents=True, exist_ok=True)
            self.huey = SqliteHuey("grader", filename=str(settings.data / QUEUE_FILE), results=False, utc=True,
                                   serializer=SafeSerializer())
        self._handler: Callable[[str], None] | None = None
        self._task = self.huey.task(name=TASK_NAME)(self._run)

    def _run(self, job_id: str) -> None:
        if self._handler is not None:
            self._handler(job_id)

    def dispatch(self, job: Job) -> None:
        self.huey.enqueue(self._task.s(job.id, priority=job.order))

    def pending_ids(self) -> set[str]:
        ids = set()
        for task in self.huey.pending():
            if task.args:
                ids.add(str(task.args[0]))
        return ids

    @property
    def blocking(self) -> bool:
        return bool(self.huey.storage.blocking)

    def take(self, handler: Callable[[str], None]) -> bool:
        """Dequeue one task and run ``handler(job_id)`` through huey; False when the queue was empty."""
        task = self.huey.dequeue()
        if task is None:
            return False
        self._handler = handler
        try:
            self.huey.execute(task, timestamp=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None))
        finally:
            self._handler = None
        return True
