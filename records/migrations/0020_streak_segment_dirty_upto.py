"""StreakSegment.dirty_upto: the watermark of the pass that last marked a minute dirty.

The streak recompute (records.catchup.streak_fold.fold_dirty_streaks) now reads a lane's late verdicts
without holding the lane's watermark lock, so that passes go on meanwhile; a minute that a pass
marks again past the watermark the recompute read keeps its flag for the next recompute. A
column with a constant default: no table rewrite on PostgreSQL.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('records', '0019_verdict_index_for_streaks'),
    ]

    operations = [
        migrations.AddField(
            model_name='streaksegment',
            name='dirty_upto',
            field=models.BigIntegerField(default=0),
        ),
    ]
