"""The job store the service's settings name: Redis when the queue is on Redis (several hosts share
it), else ``<data>/jobs.sqlite``. Its own module, above both backends, so that the store's interface
(grader/serve/store.py) imports neither of them."""
from __future__ import annotations

from grader.serve.settings import Settings
from grader.serve.store import JobStore
from grader.serve.store_sqlite import SqliteStore


def open_store(settings: Settings) -> JobStore:
    """The store the settings name: Redis when the queue is on Redis, else ``<data>/jobs.sqlite``."""
    if settings.redis_url:
        from grader.serve.store_redis import RedisStore  # the redis package is needed with a Redis queue only

        return RedisStore(settings.redis_url)
    return SqliteStore(settings.data / "jobs.sqlite")
