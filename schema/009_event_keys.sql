-- Tally schema 009: each event's session and visitor as 64-bit keys, stored with the event.
--
-- Filtered dashboards and breakdowns (query/filtered.py) read the raw table and group its events
-- by session and count distinct visitors. Grouping by a 64-bit key instead of a string built per
-- event (and hashing visitor ids per query) makes that read several times cheaper. The keys are
-- those of the rollups: session_key is sessions_quarter's (schema 008: sipHash64 of the session
-- id; of the event id for an event without one, a session of its own), visitor_hash is
-- visitors_quarter's (0 for an event without a visitor id).
--
-- MATERIALIZED: computed by the engine at insert, never sent by a client, not in SELECT *.
-- Parts written before this migration compute them on read (the same values, only slower)
-- until merged or until `ALTER TABLE <db>.events MATERIALIZE COLUMN session_key` (and
-- visitor_hash) is run once (docs/operations.md, "Schema upgrades").

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS session_key UInt64 MATERIALIZED if(session_id = '', sipHash64(toString(event_id)), sipHash64(session_id)) COMMENT 'sipHash64(session_id); of the event_id for an event without one (sessions_quarter.session_key)';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS visitor_hash UInt64 MATERIALIZED if(visitor_id = '', toUInt64(0), sipHash64(visitor_id)) COMMENT 'sipHash64(visitor_id); 0 without one';
