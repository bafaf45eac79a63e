"""Deploy markers from records: the first record of a release nobody marked marks it.

One statement a pass, whatever the number of records: the window's (project, agent, release)
triples with their earliest time, inserted as "first record" markers. A triple already marked
is left alone, except that a "first record" marker moves earlier when the window holds an
earlier record of its release (records arrive out of order); a posted marker (the API's) keeps
the time it was given. In the pass's transaction, so a pass run twice, or killed halfway,
leaves the markers one clean pass leaves.
"""

from __future__ import annotations

from django.db import connection

from records.models import Record, ReleaseMarker

FIRST_RECORD = ReleaseMarker.Source.FIRST_RECORD.value


def mark_first_records(after: int, upto: int, lane: int = 0, lanes: int = 1) -> int:
    """Mark the releases of the lane's records with after < id <= upto; the rows written."""
    markers = ReleaseMarker._meta.db_table
    lane_filter = " AND project_id %% %s = %s" if lanes > 1 else ""
    # `WHERE` in the SELECT keeps SQLite from reading ON CONFLICT as a join's ON; both
    # databases take the statement as it is. CURRENT_TIMESTAMP: the database's clock, which
    # both store in the column's own form.
    sql = (
        f'INSERT INTO {markers} (project_id, agent, name, "time", description, link, source, '
        "created_at, updated_at) "
        f"SELECT project_id, COALESCE(agent, ''), release, MIN(ts), '', '', %s, "
        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP "
        f"FROM {Record._meta.db_table} "
        f"WHERE id > %s AND id <= %s AND release IS NOT NULL{lane_filter} "
        "GROUP BY project_id, COALESCE(agent, ''), release "
        'ON CONFLICT (project_id, agent, name) DO UPDATE SET "time" = excluded."time", '
        "updated_at = excluded.updated_at "
        f'WHERE {markers}.source = %s AND excluded."time" < {markers}."time"'
    )
    params: list = [FIRST_RECORD, after, upto]
    if lanes > 1:
        params += [lanes, lane]
    params.append(FIRST_RECORD)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
