"""``python -m grader serve ...``: the grading service, a worker for another host, tokens, secrets.

    python -m grader serve [--data DIR] [--host H] [--port P] [--gpus 0,1 | --no-gpu [--workers N]]
                           [--queue sqlite|redis://HOST:PORT/DB] [--no-workers] [--public-url URL] ...
    python -m grader serve [--gradings-per-gpu N] ...
    python -m grader serve worker [--data DIR] [--queue ...] [--gpu I [--gpu-lock FILE] | --no-gpu] [--name NAME]
    python -m grader serve tokens issue --data DIR ROSTER.csv [--expires-days 120] [--out F] [--reissue]
    python -m grader serve tokens revoke --data DIR WHO        (an email/sid, a pseudonym or the token)
    python -m grader serve tokens list --data DIR
    python -m grader serve secret --data DIR --assignment NAME [--rotate] [--out F]
    python -m grader serve prune --data DIR --older-than-days D [--results-too] [--dry-run]

Settings (serve.yaml keys and their flags) are in grader/serve/settings.py. Exit codes: 0 ok, 2 bad
settings or usage (the message names the key), 1 the service stopped on an error.
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
import os
import sys
from pathlib import Path

from grader.serve import settings as config

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s serve[%(process)d] %(message)s", datefmt="%Y-%m-%dT%H:%M:%S")
    logging.getLogger("huey").setLevel(logging.WARNING)  # huey logs every task; ours says more in one line


def _settings(args: argparse.Namespace) -> config.Settings | None:
    try:
        return config.load(args)
    except config.SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _connect(s: config.Settings):
    from grader.serve.queue import JobQueue
    from grader.serve.stores import open_store

    config.private_dir(s.data)
    store = open_store(s)
    store.workers()  # reach the server now: a wrong --queue fails here, with its address
    return store, JobQueue(s)


def serve_command(args: argparse.Namespace) -> int:
    _logging()
    s = _settings(args)
    if s is None:
        return EXIT_USAGE
    try:
        gpus = s.worker_slots() if s.run_workers else []
        store, queue = _connect(s)
    except config.SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        print(f"error: cannot open the job store or queue {s.queue!r}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    import uvicorn

    from grader.serve.app import Service, create_app
    from grader.serve.connections import server_config
    from grader.serve.supervisor import Supervisor

    log = logging.getLogger("grader.serve")
    supervisor = Supervisor(s, gpus)
    app = create_app(s, Service(s, store, queue), supervisor)
    log.info("service on http://%s:%d (public %s), queue %s, %d worker(s)%s", s.host, s.port, s.base_url,
             queue.kind, len(supervisor.slots), " static" if s.no_gpu else "")
    server = uvicorn.Server(server_config(app, s))
    server.run()
    return EXIT_OK if server.started else EXIT_ERROR


def worker_command(args: argparse.Namespace) -> int:
    _logging()
    s = _settings(args)
    if s is None:
        return EXIT_USAGE
    from grader.serve.worker import NameTaken, Worker, default_name

    gpu = None if s.no_gpu else str(getattr(args, "gpu", None) or "0")
    if gpu is not None and "CUDA_VISIBLE_DEVICES" not in os.environ:  # a worker started by hand on a host
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        store, queue = _connect(s)
    except Exception as exc:
        print(f"error: cannot open the job store or queue {s.queue!r}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    lock = getattr(args, "gpu_lock", None)
    try:
        Worker(s, store, queue, getattr(args, "name", None) or default_name(gpu), gpu,
               Path(lock).resolve() if lock and gpu is not None else None).run()
    except NameTaken as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # open's mode applies only to a new file: an existing tokens.csv may be 0644
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def tokens_command(args: argparse.Namespace) -> int:
    from grader.serve.auth import Tokens, read_roster
    from grader.untrusted.cells import safe_row  # roster labels are anyone's text: never a formula

    data = config.private_dir(Path(getattr(args, "data", None) or config.Settings.data))
    tokens = Tokens(data)
    if args.tokens_command == "issue":
        try:
            labels = read_roster(Path(args.roster))
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        issued, skipped = tokens.issue(labels, args.expires_days or None, reissue=args.reissue)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["label", "pseudonym", "token"])
        w.writerows(safe_row(row) for row in issued)
        if args.out:
            _write_private(Path(args.out), buf.getvalue())
        else:
            sys.stdout.write(buf.getvalue())
        print(f"{len(issued)} token(s) issued{' into ' + args.out if args.out else ''}; they are stored hashed "
              "and cannot be shown again", file=sys.stderr)
        if skipped:
            print(f"{len(skipped)} row(s) skipped: they hold a live token already (--reissue replaces it): "
                  + ", ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""), file=sys.stderr)
        return EXIT_OK
    if args.tokens_command == "revoke":
        n = tokens.revoke(args.who)
        print(f"{n} token(s) revoked" if n else f"error: no live token matches {args.who!r}",
              file=sys.stderr)
        return EXIT_OK if n else EXIT_USAGE
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["label", "pseudonym", "issued", "expires", "state"])
    for row in tokens.describe():
        w.writerow(safe_row([row["label"], row["pseudonym"], row["issued"], row["expires"], row["state"]]))
    return EXIT_OK


def secret_command(args: argparse.Namespace) -> int:
    from grader.serve.auth import AuthError, Secrets

    data = config.private_dir(Path(getattr(args, "data", None) or config.Settings.data))
    try:
        text = Secrets(data).create(args.assignment, rotate=args.rotate)
    except AuthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if text is None:
        print(f"error: assignment {args.assignment!r} has a secret already ({data / 'secrets'}); --rotate "
              "replaces it (then rebuild the Gradescope package with the new one)", file=sys.stderr)
        return EXIT_USAGE
    if args.out:
        _write_private(Path(args.out), text + "\n")
        print(f"secret for {args.assignment!r} written to {args.out} (mode 0600); build the Gradescope package "
              f"with --service-secret-file {args.out}", file=sys.stderr)
    else:
        print(text)
        print(f"(the secret for {args.assignment!r}; shown once: save it to a file for --service-secret-file)",
              file=sys.stderr)
    return EXIT_OK


def prune_command(args: argparse.Namespace) -> int:
    """Delete old finished jobs' archives (and results with --results-too): grader/serve/retention.py."""
    from grader.serve.retention import prune, report

    s = _settings(args)
    if s is None:
        return EXIT_USAGE
    if args.older_than_days < 0:
        print("error: --older-than-days must be 0 or more", file=sys.stderr)
        return EXIT_USAGE
    try:
        store, _ = _connect(s)
    except Exception as exc:
        print(f"error: cannot open the job store or queue {s.queue!r}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    pruned = prune(store, s.data, args.older_than_days, results_too=args.results_too, dry_run=args.dry_run)
    print("\n".join(report(pruned, args.dry_run)))
    return EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand of ``python -m grader`` and its own subcommands."""
    config.add_flags(p, service=True)
    p.set_defaults(func=serve_command)
    sub = p.add_subparsers(dest="serve_command", metavar="SUBCOMMAND")

    w = sub.add_parser("worker", help="one worker, on this host, sharing the service's queue (--queue redis://...)")
    config.add_flags(w, service=False)
    w.add_argument("--gpu", help="the GPU index this worker grades on (default 0)")
    w.add_argument("--gpu-lock", help="a lock file shared by every worker on this GPU (start several, each with "
                                      "its own --name, to compile one job while another uses the GPU)")
    w.add_argument("--name", help="the worker's name in the queue (default: HOST-gpuI)")
    w.set_defaults(func=worker_command)

    t = sub.add_parser("tokens", help="students' tokens: issue from a roster, revoke, list")
    tsub = t.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    ti = tsub.add_parser("issue", help="one token per roster row (column email or sid), printed once")
    ti.add_argument("roster", help="a CSV file with an 'email' or 'sid' column")
    ti.add_argument("--expires-days", type=float, default=120.0, help="days until the tokens expire (default 120)")
    ti.add_argument("--out", help="write the CSV of tokens here (mode 0600) instead of stdout")
    ti.add_argument("--reissue", action="store_true", help="replace the live tokens of these rows")
    tr = tsub.add_parser("revoke", help="revoke a student's tokens")
    tr.add_argument("who", help="an email or sid from the roster, a pseudonym, or the token itself")
    tl = tsub.add_parser("list", help="list the tokens (never the tokens themselves)")
    for q in (ti, tr, tl):
        q.add_argument("--data", default=argparse.SUPPRESS, help="the service's folder")
    t.set_defaults(func=tokens_command)

    sc = sub.add_parser("secret", help="create (or --rotate) an assignment's HMAC secret for the Gradescope package")
    sc.add_argument("--data", default=argparse.SUPPRESS, help="the service's folder")
    sc.add_argument("--assignment", required=True, help="the assignment's name (X-Grader-Assignment)")
    sc.add_argument("--rotate", action="store_true", help="replace an existing secret")
    sc.add_argument("--out", help="write the secret to this file (mode 0600) instead of printing it")
    sc.set_defaults(func=secret_command)

    pr = sub.add_parser("prune", help="delete the archives (--results-too: the whole jobs) of jobs finished "
                                      "more than D days ago; queued and running jobs are never touched")
    config.add_flags(pr, service=False)
    pr.add_argument("--older-than-days", type=float, required=True, help="finished more than this many days ago")
    pr.add_argument("--results-too", action="store_true", default=False,
                    help="delete their results and records too (the same archive is then graded again)")
    pr.add_argument("--dry-run", action="store_true", default=False, help="only print what would be deleted")
    pr.set_defaults(func=prune_command)
