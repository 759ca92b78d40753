-- Tally schema 007: days in the project's time zone, and bots left out of every number.
--
-- Bots. Every rollup gains is_bot (events.is_bot, schema 005) as the last column of its sorting
-- key, so that a query can leave bot rows out or count them. The tables are altered in place:
-- their rows written before this migration keep their sums and read as is_bot = 0, which is what
-- every event stored before it carries (no history is lost, nothing is rebuilt). Each view is
-- then changed to write is_bot, with MODIFY QUERY (one atomic change: no insert is missed).
--
-- Time zones. Every zone's offset from UTC is a multiple of 15 minutes (Kathmandu +5:45,
-- Chatham +12:45, Lord Howe's 30-minute DST), so a project's local midnight and local hours
-- always fall on a 15-minute UTC boundary. Two new rollups keep 15-minute UTC buckets, which a
-- query regroups by toDate / toHour(toTimeZone(bucket, zone)): timeline, heatmap, event names and
-- distinct visitors per local day, exact in every zone, and a change of zone applies to all
-- history at once. They are filled from events once, on the migration that creates them, and by
-- their views after that. The other rollups stay per UTC day: a window that starts at a local
-- midnight reads them for its whole UTC days and reads the raw events of its first, partial UTC
-- day (docs/operations.md, "Time zones").

ALTER TABLE ${db}.events_daily ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: events flagged as bots' AFTER name, MODIFY ORDER BY (project_id, day, name, is_bot);

ALTER TABLE ${db}.events_daily_mv MODIFY QUERY
SELECT project_id, toDate(occurred_at) AS day, name, is_bot, count() AS events
FROM ${db}.events
GROUP BY project_id, day, name, is_bot;

ALTER TABLE ${db}.events_hourly ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: events flagged as bots' AFTER hour, MODIFY ORDER BY (project_id, hour, is_bot);

ALTER TABLE ${db}.events_hourly_mv MODIFY QUERY
SELECT project_id, toStartOfHour(occurred_at) AS hour, is_bot, count() AS events,
       countIf(name = 'pageview') AS pageviews
FROM ${db}.events
GROUP BY project_id, hour, is_bot;

ALTER TABLE ${db}.paths_daily ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: pageviews flagged as bots' AFTER path, MODIFY ORDER BY (project_id, day, path, is_bot);

ALTER TABLE ${db}.paths_daily_mv MODIFY QUERY
SELECT project_id, toDate(occurred_at) AS day, path, is_bot, count() AS views
FROM ${db}.events
WHERE name = 'pageview' AND path != ''
GROUP BY project_id, day, path, is_bot;

ALTER TABLE ${db}.referrers_daily ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: pageviews flagged as bots' AFTER referrer, MODIFY ORDER BY (project_id, day, referrer, is_bot);

ALTER TABLE ${db}.referrers_daily_mv MODIFY QUERY
SELECT project_id, toDate(occurred_at) AS day, referrer, is_bot, count() AS views
FROM ${db}.events
WHERE name = 'pageview' AND referrer != ''
GROUP BY project_id, day, referrer, is_bot;

ALTER TABLE ${db}.clients_daily ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: events flagged as bots' AFTER device_type, MODIFY ORDER BY (project_id, day, browser, os, device_type, is_bot);

ALTER TABLE ${db}.clients_daily_mv MODIFY QUERY
SELECT project_id, toDate(occurred_at) AS day, browser, os, device_type, is_bot,
       count() AS events
FROM ${db}.events
GROUP BY project_id, day, browser, os, device_type, is_bot;

ALTER TABLE ${db}.visitors_daily ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: events flagged as bots' AFTER visitor_hash, MODIFY ORDER BY (project_id, day, visitor_hash, is_bot);

ALTER TABLE ${db}.visitors_daily_mv MODIFY QUERY
SELECT project_id, toDate(occurred_at) AS day, sipHash64(visitor_id) AS visitor_hash, is_bot,
       count() AS events
FROM ${db}.events
WHERE visitor_id != ''
GROUP BY project_id, day, visitor_hash, is_bot;

ALTER TABLE ${db}.sessions_daily ADD COLUMN IF NOT EXISTS is_bot UInt8 COMMENT '1: events flagged as bots' AFTER session_hash, MODIFY ORDER BY (project_id, day, session_hash, is_bot);

ALTER TABLE ${db}.sessions_daily_mv MODIFY QUERY
SELECT project_id, toDate(occurred_at) AS day,
       if(session_id = '', toUInt64(0), sipHash64(session_id)) AS session_hash,
       is_bot,
       count() AS events,
       countIf(name = 'pageview') AS pageviews,
       min(occurred_at) AS first_at,
       countIf(name = 'session_end') AS ends,
       countIf(name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated,
       sumIf(assumeNotNull(duration_ms), name = 'session_end' AND duration_ms IS NOT NULL) AS stated_ms,
       sumIf(toUnixTimestamp64Milli(occurred_at), name = 'session_end' AND duration_ms IS NULL) AS unstated_at_ms
FROM ${db}.events
GROUP BY project_id, day, session_hash, is_bot;

-- The session_end sums per project, day and bot flag (schema 004's projection, split by is_bot
-- so that a query leaving bots out can still read it). Exact for the same reasons as 004's.
ALTER TABLE ${db}.sessions_daily ADD PROJECTION IF NOT EXISTS ends_daily_bots
(
    SELECT project_id, day, is_bot, sum(ends), sum(stated_ms),
           sumIf(toInt128(unstated_at_ms), session_hash != 0)
    GROUP BY project_id, day, is_bot
);

-- 004's projection, superseded by ends_daily_bots: no longer built at insert and merge.
ALTER TABLE ${db}.sessions_daily DROP PROJECTION IF EXISTS ends_daily;

-- How many events of each name per project and 15 minutes (UTC), bots apart? (timeline, heatmap,
-- totals and event names in the project's zone; bots left out)
CREATE TABLE IF NOT EXISTS ${db}.events_quarter
(
    project_id LowCardinality(String),
    bucket     DateTime('UTC') COMMENT 'start of the 15-minute UTC interval',
    name       LowCardinality(String),
    is_bot     UInt8,
    events     UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (project_id, bucket, name, is_bot)
SETTINGS non_replicated_deduplication_window = 1000;

-- Filled from the events stored before this migration, once: only while the table is empty,
-- and before its view exists, so no event is counted twice (docs/operations.md, "Schema upgrades").
INSERT INTO ${db}.events_quarter (project_id, bucket, name, is_bot, events)
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket, name, is_bot, count()
FROM ${db}.events
WHERE (SELECT count() FROM ${db}.events_quarter) = 0
GROUP BY project_id, bucket, name, is_bot;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.events_quarter_mv TO ${db}.events_quarter AS
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket, name, is_bot, count() AS events
FROM ${db}.events
GROUP BY project_id, bucket, name, is_bot;

-- Which visitors were active in which 15 minutes (UTC), bots apart? (distinct visitors per local
-- day and in a window that starts at a local midnight; visitor ids hashed to 64 bits)
CREATE TABLE IF NOT EXISTS ${db}.visitors_quarter
(
    project_id   LowCardinality(String),
    bucket       DateTime('UTC') COMMENT 'start of the 15-minute UTC interval',
    visitor_hash UInt64 COMMENT 'sipHash64(visitor_id); non-empty ids only',
    is_bot       UInt8,
    events       UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (project_id, bucket, visitor_hash, is_bot)
SETTINGS non_replicated_deduplication_window = 1000;

INSERT INTO ${db}.visitors_quarter (project_id, bucket, visitor_hash, is_bot, events)
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket,
       sipHash64(visitor_id) AS visitor_hash, is_bot, count()
FROM ${db}.events
WHERE visitor_id != '' AND (SELECT count() FROM ${db}.visitors_quarter) = 0
GROUP BY project_id, bucket, visitor_hash, is_bot;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.visitors_quarter_mv TO ${db}.visitors_quarter AS
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket,
       sipHash64(visitor_id) AS visitor_hash, is_bot, count() AS events
FROM ${db}.events
WHERE visitor_id != ''
GROUP BY project_id, bucket, visitor_hash, is_bot;
