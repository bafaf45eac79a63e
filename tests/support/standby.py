"""A product on a private primary and standby: settings, set-up and the folded rows compared."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
from django.db import connection

from records import catchup
from records.models import Project
from records.store.ingest import ingest
from workers import processes

# databases), in one order.
# Every folded row of every project, keyed by the project's name (ids differ between
# databases), in one order.
SNAPSHOT = {
    "rollups": """
        SELECT p.name, r.grain, CAST(r.bucket AS text), r.kind, r.agent, r.model, r.key, r.count,
               r.tokens_in, r.tokens_out, round(CAST(r.latency_sum AS numeric), 6),
               CAST(r.sketch AS text)
        FROM records_rollup r JOIN records_project p ON p.id = r.project_id ORDER BY 1, 2, 3, 4,
             5, 6, 7""",
    "runs": """
        SELECT p.name, r.run_id, r.parent_run_id, r.agent, r.session_id, CAST(r.first_ts AS text),
               CAST(r.last_ts AS text), r.record_count, r.has_contract_break, r.has_error,
               r.has_fallback, r.has_swap, CAST(r.kind_counts AS text),
               CAST(r.models_seen AS text), r.has_violation
        FROM records_run r JOIN records_project p ON p.id = r.project_id ORDER BY 1, 2""",
    "classifications": """
        SELECT p.name, c.run_id, c.tool_call_id, CAST(c.first_ts AS text), c.first_key,
               c.seat_model, c.agent, c.fell_back, CAST(c.seat_ts AS text), c.seat_key, c.cause
        FROM records_classification c JOIN records_project p ON p.id = c.project_id
        ORDER BY 1, 2, 3""",
    "streaks": """
        SELECT p.name, s.model, s.current, s.longest, CAST(s.last_broken_at AS text)
        FROM records_streak s JOIN records_project p ON p.id = s.project_id ORDER BY 1, 2""",
}


def snapshot(cursor) -> dict[str, list[tuple]]:
    """SNAPSHOT's rows, read with `cursor` (the time zone of its session: UTC)."""
    out = {}
    for name, sql in SNAPSHOT.items():
        cursor.execute(sql)
        out[name] = [tuple(row) for row in cursor.fetchall()]
    return out


def reference(projects: dict[str, list[dict]]) -> dict[str, list[tuple]]:
    """The same records stored and folded in this process, on the test database, in one
    lane and without a pooler."""
    for name, records in projects.items():
        project = Project.objects.create(name=name)
        ingest(project.pk, enumerate(records), now=datetime.now(UTC))
    catchup.catch_up(lanes=1)
    with connection.cursor() as cursor:
        return snapshot(cursor)


def manage(env: dict, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=processes.BASE_DIR, env=env, check=True,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.stdout


def set_up(env: dict, names: list[str]) -> list[str]:
    """Migrate, and make alice, her projects `names` and a key each; returns the keys."""
    manage(env, "migrate", "-v", "0")
    return manage(env, "shell", "-c", f"NAMES = {names!r}\n{SETUP}").split()[-len(names) :]


def product_env(database_url: str, var_dir: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_REPLICA_URL")}
    env.update(DATABASE_URL=database_url, DECISIONBOARD_VAR_DIR=str(var_dir), **extra)
    return env


def post_records(base: str, key: str, records: list[dict], batch: int = 300) -> None:
    for i in range(0, len(records), batch):
        answer = requests.post(
            f"{base}/api/v1/records", json={"records": records[i : i + batch]},
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text


def metric(base: str, key: str, session=requests) -> dict:
    now = datetime.now(UTC)
    answer = session.get(
        f"{base}/api/v1/metrics/records",
        params={"from": "2026-11-19T00:00:00Z", "to": (now + timedelta(hours=1)).isoformat(),
                "interval": "day"},
        headers={"Authorization": f"Bearer {key}"}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()


SETUP = """
from django.contrib.auth import get_user_model
from records.models import ApiKey, Membership, Project
user = get_user_model().objects.create_user("alice", password="pw-alice")
for name in NAMES:
    project = Project.objects.create(name=name)
    Membership.objects.create(user=user, project=project, role="admin")
    print(ApiKey.issue(project, ApiKey.Scope.ALL)[1])
"""
