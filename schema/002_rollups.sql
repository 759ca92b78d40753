-- Tally schema 002: rollups kept up to date at insert time by materialized views.
-- The dashboard reads these instead of scanning raw events. All buckets are UTC.

-- How many events of each name happened per project and day? (timeline, totals, event breakdown)
CREATE TABLE IF NOT EXISTS ${db}.events_daily
(
    project_id LowCardinality(String),
    day        Date,
    name       LowCardinality(String),
    events     UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, name)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.events_daily_mv TO ${db}.events_daily AS
SELECT project_id, toDate(occurred_at) AS day, name, count() AS events
FROM ${db}.events
GROUP BY project_id, day, name;

-- How many events and pageviews happened per project and hour? (hourly heatmap)
CREATE TABLE IF NOT EXISTS ${db}.events_hourly
(
    project_id LowCardinality(String),
    hour       DateTime('UTC'),
    events     UInt64,
    pageviews  UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (project_id, hour)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.events_hourly_mv TO ${db}.events_hourly AS
SELECT project_id, toStartOfHour(occurred_at) AS hour, count() AS events,
       countIf(name = 'pageview') AS pageviews
FROM ${db}.events
GROUP BY project_id, hour;

-- Which pages were viewed, how often, per day? (top paths; pageviews with a non-empty path)
CREATE TABLE IF NOT EXISTS ${db}.paths_daily
(
    project_id LowCardinality(String),
    day        Date,
    path       String,
    views      UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, path)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.paths_daily_mv TO ${db}.paths_daily AS
SELECT project_id, toDate(occurred_at) AS day, path, count() AS views
FROM ${db}.events
WHERE name = 'pageview' AND path != ''
GROUP BY project_id, day, path;

-- Where did page views come from, per day? (top referrers; pageviews with a non-empty referrer)
CREATE TABLE IF NOT EXISTS ${db}.referrers_daily
(
    project_id LowCardinality(String),
    day        Date,
    referrer   String,
    views      UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, referrer)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.referrers_daily_mv TO ${db}.referrers_daily AS
SELECT project_id, toDate(occurred_at) AS day, referrer, count() AS views
FROM ${db}.events
WHERE name = 'pageview' AND referrer != ''
GROUP BY project_id, day, referrer;

-- Which browsers, operating systems and device types sent events, per day? (breakdowns)
CREATE TABLE IF NOT EXISTS ${db}.clients_daily
(
    project_id  LowCardinality(String),
    day         Date,
    browser     LowCardinality(String),
    os          LowCardinality(String),
    device_type LowCardinality(String),
    events      UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, browser, os, device_type)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.clients_daily_mv TO ${db}.clients_daily AS
SELECT project_id, toDate(occurred_at) AS day, browser, os, device_type, count() AS events
FROM ${db}.events
GROUP BY project_id, day, browser, os, device_type;

-- Which visitors were active on which day? (unique visitors; visitor ids hashed to 64 bits)
CREATE TABLE IF NOT EXISTS ${db}.visitors_daily
(
    project_id   LowCardinality(String),
    day          Date,
    visitor_hash UInt64 COMMENT 'sipHash64(visitor_id); non-empty ids only',
    events       UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, visitor_hash)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.visitors_daily_mv TO ${db}.visitors_daily AS
SELECT project_id, toDate(occurred_at) AS day, sipHash64(visitor_id) AS visitor_hash,
       count() AS events
FROM ${db}.events
WHERE visitor_id != ''
GROUP BY project_id, day, visitor_hash;

-- What did each session do per day: events, pageviews, when it started that day, and how its
-- session_end events measure it? (unique sessions, bounce rate and average session duration in one
-- read, no join). Session ids are hashed to 64 bits; hash 0 collects events without a session id.
CREATE TABLE IF NOT EXISTS ${db}.sessions_daily
(
    project_id     LowCardinality(String),
    day            Date,
    session_hash   UInt64 COMMENT 'sipHash64(session_id); 0 for events without a session id',
    events         SimpleAggregateFunction(sum, UInt64),
    pageviews      SimpleAggregateFunction(sum, UInt64),
    first_at       SimpleAggregateFunction(min, DateTime64(3, 'UTC')) COMMENT 'first event that day',
    ends           SimpleAggregateFunction(sum, UInt64) COMMENT 'session_end events',
    ends_stated    SimpleAggregateFunction(sum, UInt64) COMMENT 'session_end events with metadata.durationMs',
    stated_ms      SimpleAggregateFunction(sum, Float64) COMMENT 'sum of those stated durations',
    unstated_at_ms SimpleAggregateFunction(sum, Int64) COMMENT 'sum of the epoch-ms times of the other session_end events'
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, session_hash)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sessions_daily_mv TO ${db}.sessions_daily AS
SELECT project_id, toDate(occurred_at) AS day,
       if(session_id = '', toUInt64(0), sipHash64(session_id)) AS session_hash,
       count() AS events,
       countIf(name = 'pageview') AS pageviews,
       min(occurred_at) AS first_at,
       countIf(name = 'session_end') AS ends,
       countIf(name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated,
       sumIf(assumeNotNull(duration_ms), name = 'session_end' AND duration_ms IS NOT NULL) AS stated_ms,
       sumIf(toUnixTimestamp64Milli(occurred_at), name = 'session_end' AND duration_ms IS NULL) AS unstated_at_ms
FROM ${db}.events
GROUP BY project_id, day, session_hash;
