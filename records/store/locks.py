"""The keys of the PostgreSQL advisory locks the product takes, in one place so that no two
locks share one: the lane switch and the creation of a day's partition once did, so a lane
switch waited for partition creators and they for it (tests/test_pass_spacing.py keeps them apart).

Single-key locks (one bigint), except PASS_WAITER_LOCK_CLASS, the class of the two-key form
(class, lane): PostgreSQL keeps the two key spaces apart.
"""

# Ingest transactions hold it shared; the catch-up takes it exclusively for the instant it reads
# max(id) (records.store.writer, records.catchup.passes._safe_high_water).
INGEST_LOCK_KEY = 0x44420001
# Creators of partitions queue on it instead of racing to CREATE one name
# (records.store.partitions).
PARTITION_LOCK_KEY = 0x44420002
# Serialises changes of the catch-up lane count (records.catchup.passes._switch_lanes).
LANE_SWITCH_LOCK_KEY = 0x44420003
# With the lane: held by the one process waiting out a lane's pass spacing
# (records.catchup.passes.run_pass).
PASS_WAITER_LOCK_CLASS = 0x44420004

SINGLE_KEYS = (INGEST_LOCK_KEY, PARTITION_LOCK_KEY, LANE_SWITCH_LOCK_KEY)
