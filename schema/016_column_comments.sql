-- Tally schema 016: three column comments said less than the columns hold; analysts read them
-- in system.columns (docs/operations.md, "Tables for analysts"), so they are corrected here
-- rather than in the released files that wrote them (a comment only: no data is touched).
--
-- - events.event_id is not given by Tally's ingestion but by ClickHouse (its DEFAULT
--   generateUUIDv4()) when the loader INSERTs the event from the ingest log.
-- - sessions_daily.ends_stated and sessions_quarter.ends_stated count the session_end events
--   whose metadata.durationMs is a number >= 0 (events.duration_ms not NULL), not every one that
--   has the key: a negative, a string or null is not a duration, and such an event counts with
--   the others (unstated_at_ms, ends_unstated), as the README's metric definition says.

ALTER TABLE ${db}.events COMMENT COLUMN event_id 'a random UUID, given by ClickHouse (generateUUIDv4()) when the event is loaded from the ingest log';

ALTER TABLE ${db}.sessions_daily COMMENT COLUMN ends_stated 'session_end events whose metadata.durationMs is a number >= 0 (events.duration_ms not NULL)';

ALTER TABLE ${db}.sessions_quarter COMMENT COLUMN ends_stated 'session_end events whose metadata.durationMs is a number >= 0: (its Float64 bits << 64) | sipHash64(event_id) each';

ALTER TABLE ${db}.sessions_quarter COMMENT COLUMN ends_unstated 'session_end events without a metadata.durationMs number >= 0 (events.duration_ms NULL): (epoch ms << 64) | sipHash64(event_id) each';
