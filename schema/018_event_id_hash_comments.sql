-- Tally schema 018: the comments that name the hash of an event's id say what is hashed, its
-- text: sipHash64(toString(event_id)), as every view and events.session_key compute it.
-- sipHash64(event_id) of the UUID itself hashes its 16 bytes and is another number, so an analyst
-- who computed a key from the earlier comments joined to nothing. A comment only: no data is
-- touched.

ALTER TABLE ${db}.events COMMENT COLUMN session_key 'sipHash64(session_id); for an event without a session id, sipHash64(toString(event_id)) (sessions_quarter.session_key)';

ALTER TABLE ${db}.sessions_quarter COMMENT COLUMN session_key 'sipHash64(session_id); for an event without a session id, sipHash64(toString(event_id))';

ALTER TABLE ${db}.sessions_quarter COMMENT COLUMN ends_stated 'session_end events whose metadata.durationMs is a number >= 0: (its Float64 bits << 64) | sipHash64(toString(event_id)) each';

ALTER TABLE ${db}.sessions_quarter COMMENT COLUMN ends_unstated 'session_end events without a metadata.durationMs number >= 0 (events.duration_ms NULL): (epoch ms << 64) | sipHash64(toString(event_id)) each';
