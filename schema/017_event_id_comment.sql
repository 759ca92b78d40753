-- Tally schema 017: events.event_id is given by Tally when it accepts the event, no longer by
-- ClickHouse when the loader stores it (schema 016's comment). The id travels in the ingest log
-- with the event, so a segment loaded again after an INSERT cut short (a crash after `events`
-- stored it and before every rollup did) gives the rollups the ids `events` holds: the rollups'
-- session key of an event without a session id is a hash of its id. The column's DEFAULT
-- generateUUIDv4() stays, for rows stored by other means (and segments written before).
-- A comment only: no data is touched.

ALTER TABLE ${db}.events COMMENT COLUMN event_id 'a random UUID, given by Tally when it accepts the event (kept in the ingest log with it); generateUUIDv4() for rows stored by other means';
