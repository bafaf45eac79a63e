"""The catch-up: the write path of the rollups.

Ingest only stores records. The catch-up folds the committed ones, in id order from a database
watermark, into what the pages, the read API and the alerts read: rollup rows by minute, hour
and day, run summaries, classifications, tool decisions and streak segments. Its one entry is
`catch_up()` (the workers' task calls it); the rest of the product reads what it wrote through
records.metrics.definitions and never imports its modules:

- lanes: projects dealt into lanes, each with its own watermark, folded in parallel;
- passes: one pass of a lane (its window of ids, the spacing between passes, lane switches);
- reads: the lane's records in chunks, stored rows by their keys;
- batch: a pass's records aggregated in memory;
- upserts: the batch written as rollup cells, run summaries and classifications;
- tool_funnel: the tool decisions of picks, outcomes and turns;
- streak_fold: the contract-broken streaks, recomputed minute by minute;
- marker_fold: the deploy markers of releases first seen in a pass's records;
- housekeeping: ANALYZE and VACUUM of what the catch-up grows and churns;
- rebuild: every rollup dropped and folded again from the records;
- reprice: records priced again after a price override changed, what was folded moved by the
  difference (`reprice()`, the workers' re-pricing task).

docs/architecture.md draws the way a record travels; docs/decisions/ holds why it is built so.
"""

from records.catchup.housekeeping import (
    ANALYZE_STATISTICS_TARGET,
    analyze_if_grown,
    vacuum_if_churned,
)
from records.catchup.lanes import (
    WATERMARK,
    configured_lanes,
    folded_upto,
    lane_name,
    lane_of,
    lane_watermarks,
    parse_lane_name,
    streaks_folded_name,
)
from records.catchup.passes import (
    PASS_SPACING_SECONDS,
    PassResult,
    catch_up,
    default_batch,
    run_pass,
)
from records.catchup.rebuild import rebuild, rebuild_if_requested
from records.catchup.reprice import reprice
from records.catchup.streak_fold import (
    STREAK_COST_SHARE,
    STREAK_SETTLE_SECONDS,
    fold_dirty_streaks,
)

__all__ = [
    "ANALYZE_STATISTICS_TARGET",
    "PASS_SPACING_SECONDS",
    "STREAK_COST_SHARE",
    "STREAK_SETTLE_SECONDS",
    "WATERMARK",
    "PassResult",
    "analyze_if_grown",
    "catch_up",
    "configured_lanes",
    "default_batch",
    "fold_dirty_streaks",
    "folded_upto",
    "lane_name",
    "lane_of",
    "lane_watermarks",
    "parse_lane_name",
    "rebuild",
    "rebuild_if_requested",
    "reprice",
    "run_pass",
    "streaks_folded_name",
    "vacuum_if_churned",
]
