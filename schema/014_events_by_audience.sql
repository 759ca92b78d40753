-- Tally schema 014: the events again, sorted by country and browser, so that a filter on either
-- reads only the events it keeps.
--
-- A dashboard or breakdown filtered by country or browser (`["is","country",["US"]]`) keeps the
-- events from there (query/filtered.py). In `events`, sorted by (project_id, occurred_at), and in
-- schema 013's projection, sorted by page, those events are spread over every granule of the
-- window: the filter read every event's name, path, referrer and session key to keep a quarter of
-- them. On a 10M-event tenant over 90 days the country-filtered dashboard's two big reads (the
-- counts of names, pages and referrers; the kept sessions' keys) took 276 and 301 ms for DE, a
-- tenth of the events.
--
-- This projection keeps the same columns as schema 013's, sorted by (project_id, country,
-- browser, occurred_at): a country filter with `is` is a key range per value, and a browser filter
-- a key range per value inside each country's range, so ClickHouse reads fewer granules here than
-- in the table and picks this projection. Other filters (os, device type, `contains`, the session
-- dimensions) and the unfiltered views read what they read before. The answers are the same
-- whichever is read (tests/test_path_projection.py compares both).
--
-- Cost (README, the paragraph on the projections; the benchmark's cost section): `events` takes
-- 181 MB on disk at 1M events with both projections, 145 MB with by_path alone; the INSERT sorts
-- one more copy of its rows. Parts written before this migration get the
-- projection from the background mutation below, started once when the migration is applied
-- (system.mutations shows it); until it is done a filtered query reads those parts as before.

ALTER TABLE ${db}.events ADD PROJECTION IF NOT EXISTS by_audience
(
    SELECT project_id, occurred_at, name, path, referrer, session_id, browser, os, device_type,
           country, is_bot, duration_ms, session_key, visitor_hash
    ORDER BY project_id, country, browser, occurred_at
);

ALTER TABLE ${db}.events MATERIALIZE PROJECTION by_audience SETTINGS mutations_sync = 0;
