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

-- How many events and pageviews did each session have per day, and when did it start that day?
-- (unique sessions, bounce rate, session-duration fallback; session ids hashed to 64 bits)
CREATE TABLE IF NOT EXISTS ${db}.sessions_daily
(
    project_id   LowCardinality(String),
    day          Date,
    session_hash UInt64 COMMENT 'sipHash64(session_id); non-empty ids only',
    events       SimpleAggregateFunction(sum, UInt64),
    pageviews    SimpleAggregateFunction(sum, UInt64),
    first_at     SimpleAggregateFunction(min, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, session_hash)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sessions_daily_mv TO ${db}.sessions_daily AS
SELECT project_id, toDate(occurred_at) AS day, sipHash64(session_id) AS session_hash,
       count() AS events, countIf(name = 'pageview') AS pageviews, min(occurred_at) AS first_at
FROM ${db}.events
WHERE session_id != ''
GROUP BY project_id, day, session_hash;

-- When did sessions end, and how long did they say they lasted? (average session duration)
CREATE TABLE IF NOT EXISTS ${db}.session_ends
(
    project_id   LowCardinality(String),
    occurred_at  DateTime64(3, 'UTC'),
    session_hash UInt64 COMMENT 'sipHash64(session_id), 0 when the event has no session id',
    duration_ms  Nullable(Float64) COMMENT 'metadata.durationMs when it is a number >= 0'
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(occurred_at)
ORDER BY (project_id, occurred_at)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.session_ends_mv TO ${db}.session_ends AS
SELECT project_id, occurred_at,
       if(session_id = '', toUInt64(0), sipHash64(session_id)) AS session_hash, duration_ms
FROM ${db}.events
WHERE name = 'session_end';
