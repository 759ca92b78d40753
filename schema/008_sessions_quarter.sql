-- Tally schema 008: one row per session and 15 minutes, with the session's first values.
--
-- A session dimension (source, channel, utm_*, entryPage, exitPage) is the value of the session's
-- first event (first or last pageview) in the window; every event of the session counts under it.
-- Read from the raw table that is a GROUP BY session over every event of the window. This rollup
-- keeps, per project, 15-minute UTC bucket, session and bot flag, the states of those first and
-- last values (argMin / argMax by time), the session's distinct visitors and its event and
-- pageview counts. Merging the states of a session's buckets inside a window gives exactly the
-- raw table's answer, in every zone: a window starts and ends at local midnights, which are
-- always on a 15-minute UTC boundary (schema 007). An event without a session id is a session of
-- its own: its key is a hash of its event_id, and sessioned = 0.
--
-- Session ids and visitor ids are hashed to 64 bits, as in sessions_daily and visitors_quarter.
-- Filled from events once, on the migration that creates it (only while it is empty, before its
-- view exists, so no event is counted twice), and by its view after that.

CREATE TABLE IF NOT EXISTS ${db}.sessions_quarter
(
    project_id   LowCardinality(String),
    bucket       DateTime('UTC') COMMENT 'start of the 15-minute UTC interval',
    session_key  UInt64 COMMENT 'sipHash64(session_id); sipHash64 of the event_id for an event without one',
    sessioned    UInt8 COMMENT '1: a session id; 0: an event without one, a session of its own',
    is_bot       UInt8,
    events       SimpleAggregateFunction(sum, UInt64),
    pageviews    SimpleAggregateFunction(sum, UInt64),
    visitors     AggregateFunction(groupUniqArray, UInt64) COMMENT 'sipHash64 of the non-empty visitor ids',
    source       AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    channel      AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    utm_source   AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    utm_medium   AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    utm_campaign AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    utm_content  AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    utm_term     AggregateFunction(argMin, String, DateTime64(3, 'UTC')),
    entry_page   AggregateFunction(argMin, String, DateTime64(3, 'UTC')) COMMENT 'path of the first pageview',
    exit_page    AggregateFunction(argMax, String, DateTime64(3, 'UTC')) COMMENT 'path of the last pageview'
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (project_id, bucket, session_key, sessioned, is_bot)
SETTINGS non_replicated_deduplication_window = 1000;

INSERT INTO ${db}.sessions_quarter (project_id, bucket, session_key, sessioned, is_bot, events,
    pageviews, visitors, source, channel, utm_source, utm_medium, utm_campaign, utm_content,
    utm_term, entry_page, exit_page)
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket,
       if(session_id = '', sipHash64(toString(event_id)), sipHash64(session_id)) AS session_key,
       toUInt8(session_id != '') AS sessioned, is_bot,
       count() AS events, countIf(name = 'pageview') AS pageviews,
       groupUniqArrayStateIf(sipHash64(visitor_id), visitor_id != '') AS visitors,
       argMinState(toString(source), occurred_at) AS source,
       argMinState(toString(channel), occurred_at) AS channel,
       argMinState(utm_source, occurred_at) AS utm_source,
       argMinState(utm_medium, occurred_at) AS utm_medium,
       argMinState(utm_campaign, occurred_at) AS utm_campaign,
       argMinState(utm_content, occurred_at) AS utm_content,
       argMinState(utm_term, occurred_at) AS utm_term,
       argMinStateIf(path, occurred_at, name = 'pageview') AS entry_page,
       argMaxStateIf(path, occurred_at, name = 'pageview') AS exit_page
FROM ${db}.events
WHERE (SELECT count() FROM ${db}.sessions_quarter) = 0
GROUP BY project_id, bucket, session_key, sessioned, is_bot;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sessions_quarter_mv TO ${db}.sessions_quarter AS
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket,
       if(session_id = '', sipHash64(toString(event_id)), sipHash64(session_id)) AS session_key,
       toUInt8(session_id != '') AS sessioned, is_bot,
       count() AS events, countIf(name = 'pageview') AS pageviews,
       groupUniqArrayStateIf(sipHash64(visitor_id), visitor_id != '') AS visitors,
       argMinState(toString(source), occurred_at) AS source,
       argMinState(toString(channel), occurred_at) AS channel,
       argMinState(utm_source, occurred_at) AS utm_source,
       argMinState(utm_medium, occurred_at) AS utm_medium,
       argMinState(utm_campaign, occurred_at) AS utm_campaign,
       argMinState(utm_content, occurred_at) AS utm_content,
       argMinState(utm_term, occurred_at) AS utm_term,
       argMinStateIf(path, occurred_at, name = 'pageview') AS entry_page,
       argMaxStateIf(path, occurred_at, name = 'pageview') AS exit_page
FROM ${db}.events
GROUP BY project_id, bucket, session_key, sessioned, is_bot;
