"""`manage.py doctor`: is this installation working, is it ready to go live, and what to fix.

A finding is broken (the database, the broker, migrations, a queue unserved, partitions
missing: the command exits 1), a production-readiness item (the embedded defaults that
`bin/start` chooses on purpose — SQLite, the generated SECRET_KEY, local ALLOWED_HOSTS, no HTTPS
— printed as advice, and failed only by `doctor --deploy`, the checklist before going live, as
Django's `check --deploy` does), or a note: a choice an operator may make on purpose, printed
but never failed.

Configuration is judged by a pure function over the settings' values; services, migrations
and queues by the same probes as /readyz (ops.probes) and the heartbeats of workers.heartbeat;
security by Django's own deployment checks (`manage.py check --deploy`); whether the catch-up
lanes can run at once by asking the workers themselves (Celery's remote control: which consume
the `default` queue, with how many process slots).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import grpc
from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.outage import DATABASE_UNAVAILABLE
from config.queues import Queue
from ops import probes
from ops.findings import Finding
from ops.readiness import configuration, generated_secret_key, security
from records.store.backends import backend
from workers.heartbeat import (
    STALE_AFTER,
    HostWorker,
    QueueStatus,
    host_workers,
    queue_status,
)

OTLP_GRPC_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
OTLP_GRPC_TIMEOUT = 2.0


def _worker_command(queue: str) -> str:
    return (
        f"celery -A config worker --queues {queue} --hostname {queue}@%h "
        f"(deploy/systemd/decisionboard-worker@.service: systemctl enable --now "
        f"decisionboard-worker@{queue})"
    )


def otlp_grpc(port: int, timeout: float = OTLP_GRPC_TIMEOUT) -> Finding:
    """Does an OTLP/gRPC receiver answer on this machine's DECISIONBOARD_OTLP_GRPC_PORT? Asked
    with an export without a key: the receiver's UNAUTHENTICATED proves it is Decisionboard's
    and reaches its code. A note either way but up: it may run on another machine."""
    section = "receivers"
    if port == 0:
        return Finding(section, True, "OTLP/gRPC is off (DECISIONBOARD_OTLP_GRPC_PORT=0)")
    address = f"127.0.0.1:{port}"
    with grpc.insecure_channel(address) as channel:
        export = channel.unary_unary(OTLP_GRPC_EXPORT)
        try:
            export(b"", timeout=timeout)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Finding(section, True, f"OTLP/gRPC receiver answers on {address}")
    return Finding(
        section,
        False,
        f"no OTLP/gRPC receiver answers on {address} ({code.name})",
        "run manage.py serve_otlp_grpc (deploy/systemd/decisionboard-otlp-grpc.service) on this "
        "machine, or set DECISIONBOARD_OTLP_GRPC_PORT=0 if OTLP/gRPC is not wanted",
        note=True,
    )


def queues(statuses: Iterable[QueueStatus], now: datetime) -> list[Finding]:
    """Each queue served lately (a worker ran beat's heartbeat on it within STALE_AFTER)? A
    queue whose workers started less than STALE_AFTER ago, with no heartbeat since, is not
    judged yet."""
    statuses = list(statuses)
    period = int(STALE_AFTER.total_seconds())
    found = []
    for status in statuses:
        since_start = (
            int((now - status.worker_started).total_seconds()) if status.worker_started else None
        )
        if status.starting:
            previous = (
                f"; the previous one {int((now - status.last_seen).total_seconds())} s ago"
                if status.last_seen
                else ""
            )
            found.append(
                Finding(
                    "queues",
                    False,
                    f"queue {status.queue}: no heartbeat yet; workers started {since_start} s "
                    f"ago{previous} (unserved if none comes within {period} s of the start)",
                    note=True,
                )
            )
        elif (
            status.stale
            and status.worker_started
            and not (status.last_seen and status.last_seen > status.worker_started)
        ):
            found.append(
                Finding(
                    "queues",
                    False,
                    f"queue {status.queue}: no heartbeat since workers started {since_start} s "
                    f"ago (more than {period} s)",
                    "start beat if it is down (celery -A config beat), or a worker on the "
                    f"queue: {_worker_command(status.queue)}",
                )
            )
        elif status.last_seen is None:
            found.append(
                Finding(
                    "queues",
                    False,
                    f"queue {status.queue}: no worker has ever served it",
                    _worker_command(status.queue),
                )
            )
        elif status.stale:
            ago = int((now - status.last_seen).total_seconds())
            found.append(
                Finding(
                    "queues",
                    False,
                    f"queue {status.queue}: last served {ago} s ago (more than {period} s)",
                    f"start a worker on it: {_worker_command(status.queue)}; or, if every worker "
                    "is busy with long tasks, another one",
                )
            )
        else:
            ago = int((now - status.last_seen).total_seconds())
            found.append(Finding("queues", True, f"queue {status.queue}: served {ago} s ago"))
    if statuses and all(s.stale and not s.starting for s in statuses):
        found.append(
            Finding(
                "queues",
                False,
                "no queue is served: beat, which sends the heartbeats, may be down too",
                "start beat once for the installation: celery -A config beat "
                "(deploy/systemd/decisionboard-beat.service)",
            )
        )
    return found


def hosts(workers: Iterable[HostWorker], now: datetime) -> list[Finding]:
    """Each host's workers (DECISIONBOARD_HOSTNAME), named, and those gone silent: a host that
    died hands its lanes to the others' workers, but its queues may then be short of slots."""
    found = []
    by_host: dict[str, list[HostWorker]] = {}
    for worker in workers:
        by_host.setdefault(worker.host, []).append(worker)
    for host, its in by_host.items():
        alive = sorted({w.worker for w in its if not w.stale})
        gone = sorted({w.worker for w in its if w.stale} - set(alive))
        if alive:
            queues_served = ", ".join(sorted({w.queue for w in its if not w.stale}))
            found.append(
                Finding("hosts", True, f"host {host}: {', '.join(alive)} ({queues_served})")
            )
        for worker in gone:
            ago = int(min((now - w.last_seen).total_seconds() for w in its if w.worker == worker))
            found.append(
                Finding(
                    "hosts",
                    False,
                    f"host {host}: worker {worker} silent for {ago} s",
                    "restart it, or ignore it if the host was taken out of service (forgotten "
                    "after a day)",
                    note=True,
                )
            )
    return found


def database_settings(pooler: str) -> list[Finding]:
    """Behind a transaction pooler jit=off is the role's default, not a startup option
    (config.settings.DATABASE_POOLER): is it?"""
    if pooler != "transaction" or not backend().features.role_settings:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        jit = cursor.fetchone()[0]
    if jit == "off":
        return [Finding("database", True, "behind a transaction pooler; jit is off")]
    return [
        Finding(
            "database",
            False,
            f"behind a transaction pooler, jit is {jit}",
            "run: python manage.py migrate (it sets the role's jit = off), or "
            "ALTER ROLE <user> SET jit = off",
            note=True,
        )
    ]


# How long the lanes check waits for the workers' replies to each broadcast (two of them).
INSPECT_TIMEOUT = 1.0


def lanes(configured: int, slots: dict[str, int] | None) -> list[Finding]:
    """Can the `configured` catch-up lanes (DECISIONBOARD_CATCHUP_LANES) fold at once? Each
    lane is one task at a time on the `default` queue (config.beat_schedule), so the workers
    consuming it need a process slot per lane. `slots`: {worker: its pool's size} of those
    workers, as they answered (None: they could not be asked)."""
    section = "lanes"
    if configured == 1:
        return [Finding(section, True, "1 catch-up lane: nothing to run in parallel")]
    queue = Queue.DEFAULT.value
    command = (
        f"celery -A config worker --queues {queue} --concurrency {configured + 1} "
        f"(deploy/systemd/decisionboard-worker@.service: add --concurrency {configured + 1} to "
        "ExecStart), or more such workers"
    )
    if slots is None:
        return [
            Finding(
                section,
                False,
                f"{configured} catch-up lanes: not checked, the workers could not be asked "
                "(the broker is unreachable)",
                note=True,  # the services section fails the broker
            )
        ]
    if not slots:
        return [
            Finding(
                section,
                False,
                f"{configured} catch-up lanes, but no worker on queue {queue} answered within "
                f"{INSPECT_TIMEOUT:g} s: how many can run at once is unknown",
                f"start one with a slot per lane and one more: {command}",
                note=True,  # the queues section already fails an unserved queue
            )
        ]
    total = sum(slots.values())
    workers = ", ".join(f"{name}: {n}" for name, n in sorted(slots.items()))
    if total < configured:
        return [
            Finding(
                section,
                False,
                f"{configured} catch-up lanes (DECISIONBOARD_CATCHUP_LANES), but the workers on "
                f"queue {queue} have {total} process slots ({workers}): at most {total} lanes "
                "fold at once, and the others wait",
                f"give them a slot per lane and one more: {command}; or set "
                f"DECISIONBOARD_CATCHUP_LANES={total}",
            )
        ]
    if total == configured:
        return [
            Finding(
                section,
                False,
                f"{configured} catch-up lanes and exactly {total} process slots on queue {queue} "
                f"({workers}): heartbeats, the alert tick and the hourly expiry take a lane's "
                "slot while they run",
                f"one slot more: {command}",
                note=True,
            )
        ]
    return [
        Finding(
            section,
            True,
            f"{configured} catch-up lanes, {total} process slots on queue {queue} ({workers})",
        )
    ]


def default_queue_slots(timeout: float = INSPECT_TIMEOUT) -> dict[str, int] | None:
    """{worker: its pool's size} of the running workers that consume the `default` queue, by
    Celery's remote control (active_queues, then stats of those workers); None when the
    broadcast failed (the broker is down)."""
    from config.celery import app

    try:
        inspect = app.control.inspect(timeout=timeout)
        queues = inspect.active_queues() or {}
        consuming = sorted(
            name
            for name, active in queues.items()
            if any(q.get("name") == Queue.DEFAULT.value for q in active or ())
        )
        if not consuming:
            return {}
        stats = app.control.inspect(destination=consuming, timeout=timeout).stats() or {}
    except Exception:  # noqa: BLE001 - the broker's own errors vary by transport
        return None
    return {
        name: int((stats.get(name) or {}).get("pool", {}).get("max-concurrency") or 0)
        for name in consuming
        if name in stats
    }


def retention(now: datetime) -> list[Finding]:
    """The records' daily partitions (PostgreSQL): tomorrow's exists and none past retention is
    still attached, which both say that the hourly expire-records task runs."""
    from records.store import partitions
    from records.store import retention as policy

    fix = "run: python manage.py expire_records (beat runs it hourly; is beat running?)"
    if not backend().features.partitioned_records:
        return [Finding("retention", True, f"records kept {policy.global_days()} days (SQLite)")]
    days = partitions.existing_days()
    today = partitions.day_of(now)
    first_kept = today - timedelta(days=policy.longest_days())
    found = []
    if today + timedelta(days=1) not in days:
        found.append(Finding("retention", False, "no records partition for tomorrow yet", fix))
    stale = sorted(day for day in days if day < first_kept - timedelta(days=1))
    if stale:
        found.append(
            Finding(
                "retention",
                False,
                f"{len(stale)} records partitions past retention still attached "
                f"(the oldest {stale[0]})",
                fix + "; it keeps one whose records are not rolled up yet",
            )
        )
    if not found:
        found.append(
            Finding(
                "retention",
                True,
                f"records kept {policy.global_days()} days in daily partitions, "
                f"{min(days, default=today)} to {max(days, default=today)}",
            )
        )
    return found


def examine(now: datetime | None = None) -> list[Finding]:
    """Every finding, section by section; what needs the database is skipped when it is down."""
    now = now or timezone.now()
    found = configuration(
        secret_key=settings.SECRET_KEY,
        generated_secret_key=generated_secret_key(),
        debug=settings.DEBUG,
        allowed_hosts=settings.ALLOWED_HOSTS,
        database_engine=settings.DATABASES["default"]["ENGINE"],
        redis_url=settings.REDIS_URL,
        site_url=settings.SITE_URL,
        metrics_token=settings.DECISIONBOARD["METRICS_TOKEN"],
    )
    found += security()
    found.append(otlp_grpc(settings.DECISIONBOARD["OTLP_GRPC_PORT"]))
    database = probes.database()
    found.append(
        Finding(
            "services",
            database.ok,
            f"database: {database.detail}",
            "" if database.ok else "start PostgreSQL, or correct DATABASE_URL",
        )
    )
    broker = probes.broker_probe()
    found.append(
        Finding(
            "services",
            broker.ok,
            f"broker: {broker.detail}",
            "" if broker.ok else "start Redis, or correct REDIS_URL",
        )
    )
    if not database.ok:
        found.append(Finding("migrations", False, "not checked: the database is unreachable"))
        found.append(Finding("queues", False, "not checked: the database is unreachable"))
        return found
    try:
        pending = probes.unapplied_migrations()
        found.append(
            Finding(
                "migrations",
                False,
                f"{len(pending)} not applied: {', '.join(pending)}",
                "run: python manage.py migrate",
            )
            if pending
            else Finding("migrations", True, "all applied")
        )
        found += queues(queue_status(now), now)
        found += hosts(host_workers(now), now)
        found += database_settings(settings.DATABASE_POOLER)
        configured = settings.DECISIONBOARD["CATCHUP_LANES"]
        asked = configured > 1 and broker.ok  # one lane runs on any worker
        found += lanes(configured, default_queue_slots() if asked else None)
        if not pending:
            found += retention(now)
    except DATABASE_UNAVAILABLE as exc:
        found.append(
            Finding(
                "services",
                False,
                f"database: lost during the checks ({exc})",
                "start PostgreSQL, or correct DATABASE_URL",
            )
        )
    return found
