-- Tally schema 004: the session_end sums per project and day, kept inside sessions_daily.
-- The dashboard's average session duration needs, per project and day, the session_end events and
-- their durations: sums that need no grouping by session. An aggregate projection keeps those sums,
-- so the dashboard reads a few rows per day rather than every session of the window (at 10M events
-- and 90 days, 1.5M rows). ClickHouse keeps it exact: each part carries its own projection, built
-- at insert and rebuilt at merge, and a query reads parts that lack it from the table itself. Parts
-- written before this migration lack it until `ALTER TABLE <db>.sessions_daily MATERIALIZE
-- PROJECTION ends_daily` (docs/operations.md, "Schema upgrades"). Queries need not name it.

-- A merge of sessions_daily combines the rows of a session and day: rebuild the projection from
-- the merged rows (the sums do not change, so it stays exact). Must precede the projection.
ALTER TABLE ${db}.sessions_daily MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild';

-- Per project and day: session_end events, the sum of their stated durations, and the sum of the
-- epoch-ms times of those without one that belong to a session (Int128: no overflow).
ALTER TABLE ${db}.sessions_daily ADD PROJECTION IF NOT EXISTS ends_daily
(
    SELECT project_id, day, sum(ends), sum(stated_ms),
           sumIf(toInt128(unstated_at_ms), session_hash != 0)
    GROUP BY project_id, day
);
