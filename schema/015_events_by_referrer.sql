-- Tally schema 015: the events that came with a referrer, sorted by it, so that the breakdown by
-- referrer reads only those.
--
-- `GET /api/breakdown?by=referrer` counts the events whose referrer is not empty (query/
-- breakdown.py: rows with an empty value are left out). The tracker sends the referrer on a
-- session's first page only, so about a tenth of the events have one (1.08M of the 10M-event
-- tenant's 10M), and in `events`, sorted by (project_id, occurred_at), they lie in every granule
-- of the window: the breakdown read all of them.
--
-- This projection keeps the columns that breakdown reads (project, time, name, referrer, bot flag,
-- visitor hash), sorted by (project_id, referrer, occurred_at): `referrer != ''` is then a key
-- range that leaves out the events without one, and ClickHouse reads it instead of the table
-- because it reads fewer granules. Measured on the 11M-event tenant of scripts/speed_load.py
-- (scripts/projection_ab.py <tenant> 7 bd_referrer: with and without projections, interleaved
-- in one process): 138 against 403 ms, the same rows; 70 MiB for 11M events, beside the table's
-- other projections (by_path 225 MiB, by_audience 136 MiB; system.projection_parts). Over HTTP,
-- the benchmark's p95 at 10M: 489 -> 159 ms (README, the schema 015 paragraph). Views that need
-- other columns (the filtered views, a referrer filter) cannot read it and read what they read
-- before. tests/test_path_projection.py compares both reads.
--
-- Parts written before this migration get the projection from the background mutation below,
-- started once when the migration is applied (system.mutations shows it); until it is done the
-- breakdown reads those parts as before.

ALTER TABLE ${db}.events ADD PROJECTION IF NOT EXISTS by_referrer
(
    SELECT project_id, occurred_at, name, referrer, is_bot, visitor_hash
    ORDER BY project_id, referrer, occurred_at
);

ALTER TABLE ${db}.events MATERIALIZE PROJECTION by_referrer SETTINGS mutations_sync = 0;
