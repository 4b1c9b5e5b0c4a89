"""The GPU grading service: ``python -m grader serve`` (grader/serve/cli.py has the settings).

HTTP (app.py, FastAPI on uvicorn) in front of a job store (store_sqlite.py / store_redis.py, the truth
about each job) and a huey queue (queue.py, SqliteHuey embedded or PriorityRedisHuey) that only
dispatches; worker.py grades one job at a time in a child ``python -m grader grade`` process.
signing.py is shared with the clients (client.py, bridge.py). upload.py takes a request's body in
(credentials first); retention.py prunes old jobs' archives.
"""
