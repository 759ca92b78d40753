-- Tally schema 020: who sent each event name, and in which 15 minutes.
--
-- A breakdown by event counts distinct visitors per event name, exactly. Read from the raw table,
-- that is every event of the window (9M rows for a 10M-event tenant over 90 days) hashed into a
-- few sets of hundreds of thousands of visitors each: 380-440 ms on 2 cores, against a target of
-- 150 ms. Per-day or per-15-minute rows keep most of those rows (a visitor sends a name once or
-- twice a session, on different days), so they barely help.
--
-- This table keeps one row per project, calendar quarter (three months, UTC), event name, visitor
-- and bot flag, with the 15-minute UTC buckets of that quarter in which that visitor sent that name.
-- A visitor counts under a name in a window when one of its buckets lies in it: a window starts and
-- ends at local midnights, always on a 15-minute UTC boundary (schema 007), so that is exact in
-- every zone. A window reads the partitions of the quarters it touches (a 90-day window two or
-- three). Rows of parts not yet merged, and of two quarters, repeat a (name, visitor) pair: the
-- read counts distinct visitor_hash, so none counts twice, and an event stored again (a retried
-- load, a backfill run twice) changes nothing, the buckets being a set. The breakdown's events and
-- pageviews come from events_quarter. For the 10M-event tenant over 100 days, 4.3M rows (half the
-- raw rows), and its 90-day breakdown by event reads them in 160 ms where the raw table took 440:
-- query/decider.py says from which window length on the rollup is read.
--
-- visitor_hash is sipHash64(visitor_id), as in events.visitor_hash (schema 009); an event without
-- a visitor id is no visitor and is not kept here. The retention TTL drops a row once its
-- last_bucket is older than the retention; the read counts no bucket older than the oldest one
-- events_quarter still holds for the project, so that a kept row's expired buckets do not count.
--
-- The view exists before the backfill, so that no event stored during the migration is missed,
-- and an event the two both see is kept once.

CREATE TABLE IF NOT EXISTS ${db}.event_visitors
(
    project_id   LowCardinality(String),
    quarter      Date COMMENT 'first day of the calendar quarter (UTC) of the buckets',
    name         LowCardinality(String),
    visitor_hash UInt64 COMMENT 'sipHash64(visitor_id); events without a visitor id are not kept',
    is_bot       UInt8,
    buckets      SimpleAggregateFunction(groupUniqArrayArray, Array(DateTime('UTC'))) COMMENT 'starts of the 15-minute UTC intervals in which the visitor sent the name',
    last_bucket  SimpleAggregateFunction(max, DateTime('UTC')) COMMENT 'the latest of buckets'
)
ENGINE = AggregatingMergeTree
PARTITION BY quarter
ORDER BY (project_id, name, visitor_hash, is_bot)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_visitors_mv TO ${db}.event_visitors AS
SELECT project_id, toStartOfQuarter(occurred_at) AS quarter, name,
       sipHash64(visitor_id) AS visitor_hash, is_bot,
       groupUniqArray(toStartOfFifteenMinutes(occurred_at)) AS buckets,
       max(toStartOfFifteenMinutes(occurred_at)) AS last_bucket
FROM ${db}.events
WHERE visitor_id != ''
GROUP BY project_id, quarter, name, visitor_hash, is_bot;

INSERT INTO ${db}.event_visitors (project_id, quarter, name, visitor_hash, is_bot, buckets,
    last_bucket)
SELECT project_id, toStartOfQuarter(occurred_at) AS quarter, name,
       sipHash64(visitor_id) AS visitor_hash, is_bot,
       groupUniqArray(toStartOfFifteenMinutes(occurred_at)) AS buckets,
       max(toStartOfFifteenMinutes(occurred_at)) AS last_bucket
FROM ${db}.events
WHERE visitor_id != ''
GROUP BY project_id, quarter, name, visitor_hash, is_bot;
