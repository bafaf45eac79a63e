"""The streak recompute reads a minute's parse errors and probes the verdicts around each
(records.catchup.streak_fold._SEGMENTS_SQL), instead of reading every verdict of the minute.

- record_verdict_model_ts, (project, model, ts) over verdicts, replaces record_verdict_ts,
  (project, ts): each probe is a range of one model's verdicts.
- record_broken_ts, (project, model, ts) over parse errors only: where a recompute starts.
- A dirty minute's segment now keeps the end of every verdict folded into it (last_ts,
  last_key), which the recompute no longer computes (records.catchup.streak_fold._mark_dirty). The minutes
  dirty when this runs get theirs from their verdicts; one of a record not folded yet only
  makes the minute late again when the pass folds it, so it is recomputed then.

On PostgreSQL the indexes are built on every partition of the records table, each under a lock
that holds ingest while it builds.
"""

from django.db import migrations, models

_DIRTY_ENDS = """
UPDATE records_streaksegment s
SET last_ts = v.ts, last_key = v.record_key
FROM records_streaksegment d
CROSS JOIN LATERAL (
    SELECT r.ts, r.record_key FROM records_record r
    WHERE r.project_id = d.project_id AND r.kind = 'classifier.verdict' AND r.model = d.model
      AND r.ts >= d.bucket AND r.ts < d.bucket + interval '1 minute'
    ORDER BY r.ts DESC, r.record_key COLLATE "C" DESC LIMIT 1
) AS v
WHERE s.id = d.id AND d.dirty AND d.grain = 'minute'
"""


def dirty_ends(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_DIRTY_ENDS)


class Migration(migrations.Migration):
    dependencies = [
        ("records", "0023_watermark_last_fold_at"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="record",
            name="record_verdict_ts",
        ),
        migrations.AddIndex(
            model_name="record",
            index=models.Index(
                condition=models.Q(("kind", "classifier.verdict")),
                fields=["project", "model", "ts"],
                name="record_verdict_model_ts",
            ),
        ),
        migrations.AddIndex(
            model_name="record",
            index=models.Index(
                condition=models.Q(("kind", "classifier.verdict"), ("outcome", "parse_error")),
                fields=["project", "model", "ts"],
                name="record_broken_ts",
            ),
        ),
        migrations.RunPython(dirty_ends, migrations.RunPython.noop),
    ]
