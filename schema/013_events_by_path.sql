-- Tally schema 013: the events again, sorted by page, so that a filter on the path reads only the
-- page's events.
--
-- A dashboard or breakdown filtered by path (`["is","path",["/pricing"]]`) keeps the events of
-- that page (query/filtered.py). `events` is sorted by (project_id, occurred_at): the page's
-- events are spread over every granule of the window, so the filter read the whole window's paths
-- and then the kept events' other columns, twice (the counts, and the kept sessions' keys). On a
-- 10M-event tenant over 90 days the most visited page keeps 3% of 9M events, and reading them
-- took 190 ms of each of those reads.
--
-- This projection keeps the columns the filtered views read, sorted by (project_id, path,
-- occurred_at): ClickHouse reads it instead of the table when that reads fewer granules, which is
-- the case for a path filter with `is` (a key range per value), and never otherwise (the
-- `contains` operators and every unfiltered view read the table as before). Answers are the same
-- whichever is read (tests/test_migrate.py compares both). Not kept: event_id, visitor_id, url,
-- metadata, ip, user_agent and the acquisition columns, which the filtered views read from the
-- table (the latest events) or from the session rollups; they are most of the table's bytes.
--
-- Cost, measured on that tenant (benchmarks/README.md): disk and INSERT time, in the benchmark's
-- cost section. Parts written before this migration get the projection from the background
-- mutation below, started once when the migration is applied (system.mutations shows it); until
-- it is done a filtered query reads those parts from the table.

ALTER TABLE ${db}.events ADD PROJECTION IF NOT EXISTS by_path
(
    SELECT project_id, occurred_at, name, path, referrer, session_id, browser, os, device_type,
           country, is_bot, duration_ms, session_key, visitor_hash
    ORDER BY project_id, path, occurred_at
);

ALTER TABLE ${db}.events MATERIALIZE PROJECTION by_path SETTINGS mutations_sync = 0;
