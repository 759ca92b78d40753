-- Tally schema 010: who was active in each 15 minutes, from which country, on which browser, OS
-- and device type.
--
-- A breakdown by country, browser, os or deviceType counts distinct visitors per value, exactly.
-- Read from the raw table, that is every event of the window (9M rows for a 10M-event tenant over
-- 90 days). This rollup keeps one row per project, 15-minute UTC bucket, country, browser, os,
-- device type, visitor and bot flag, with its events and pageviews: about a quarter of the raw
-- rows, and the distinct visitors of any value (or of any combination of these four values, the
-- filters on them) in a window are the distinct visitor_hash of its rows. A window starts and ends
-- at local midnights, always on a 15-minute UTC boundary (schema 007), so the answer is exact in
-- every zone. visitor_hash is sipHash64(visitor_id), 0 for an event without one (counted in events
-- and pageviews, never as a visitor), as in events.visitor_hash (schema 009).
--
-- Filled from events once, on the migration that creates it (only while it is empty, before its
-- view exists, so no event is counted twice), and by its view after that.

CREATE TABLE IF NOT EXISTS ${db}.audience_quarter
(
    project_id   LowCardinality(String),
    bucket       DateTime('UTC') COMMENT 'start of the 15-minute UTC interval',
    country      LowCardinality(String),
    browser      LowCardinality(String),
    os           LowCardinality(String),
    device_type  LowCardinality(String),
    visitor_hash UInt64 COMMENT 'sipHash64(visitor_id); 0 for events without one',
    is_bot       UInt8,
    events       UInt64,
    pageviews    UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (project_id, bucket, country, browser, os, device_type, visitor_hash, is_bot)
SETTINGS non_replicated_deduplication_window = 1000;

INSERT INTO ${db}.audience_quarter (project_id, bucket, country, browser, os, device_type,
    visitor_hash, is_bot, events, pageviews)
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket, country, browser, os,
       device_type, if(visitor_id = '', toUInt64(0), sipHash64(visitor_id)) AS visitor_hash,
       is_bot, count() AS events, countIf(name = 'pageview') AS pageviews
FROM ${db}.events
WHERE (SELECT count() FROM ${db}.audience_quarter) = 0
GROUP BY project_id, bucket, country, browser, os, device_type, visitor_hash, is_bot;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.audience_quarter_mv TO ${db}.audience_quarter AS
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket, country, browser, os,
       device_type, if(visitor_id = '', toUInt64(0), sipHash64(visitor_id)) AS visitor_hash,
       is_bot, count() AS events, countIf(name = 'pageview') AS pageviews
FROM ${db}.events
GROUP BY project_id, bucket, country, browser, os, device_type, visitor_hash, is_bot;
