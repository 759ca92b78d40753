-- Tally schema 019: stated session durations, summed exactly as the decimals they were sent as.
--
-- The average session duration is the mean of the window's session_end durations, rounded half
-- up (README, summary.avgSessionDurationMs): a `metadata.durationMs` of 74.3 is 74.3, as the
-- tracker wrote it. Stored as a Float64 (events.duration_ms) it is the nearest double, and a sum
-- of doubles rounds: 74.3 + 65.1 + 15.1 is 154.49999999999997 in doubles, 154.5 in decimals,
-- so the mean of those three ends was 51 where it is 51.5, rounded to 52. Schemas 002 and 007
-- summed them as doubles (sessions_daily.stated_ms), and so did the queries.
--
-- Each stated duration is now also kept as its decimal form, the shortest decimal that reads
-- back as the stored double (what toString gives, and what the JSON sent for any number a
-- tracker writes): `duration_digits`, its significand as an integer without trailing zeros, and
-- `duration_exponent`, the power of ten, so that the duration is exactly
-- duration_digits * 10^duration_exponent (74.3: 743 and -1; 1e29: 1 and 29; 0: 0 and 0), and
-- sums of them are exact: per exponent (a query over raw events adds sum(digits) * 10^exponent
-- over the few exponents in integers), or in a fixed unit (session_days below). 0 and 0 for an
-- event without a stated duration.
--
-- MATERIALIZED, as schema 009's keys: computed by the engine at insert from duration_ms, never
-- sent by a client, not in SELECT *. Parts written before compute them on read, a text parse of
-- every event read (a v2 query over 30 days of a 10M-event tenant took 60% longer), until the
-- background mutations below have written them (4 s for 10M events on 2 cores).
--
-- session_days is sessions_daily (schemas 002 and 007: per project, UTC day, session and bot
-- flag, that day's events, pageviews, first event and session_end events) with the stated
-- durations summed exactly in place of stated_ms: `stated_scaled`, the durations whose exponent
-- is -20..19 (any a tracker sends) as one count of 10^-20 ms (UInt256: a 17-digit significand
-- times at most 10^39, room for 10^21 of them), and `stated_outside`, the others (tiny or huge:
-- a visitor can send any double) as (exponent, significand) pairs. The stated total of a row is
-- stated_scaled / 10^20 + the sum of digits * 10^exponent over stated_outside, exactly. The
-- dashboard reads its session numbers here; a filtered dashboard the kept sessions' rows, one
-- semi-join on the kept keys (a second table beside sessions_daily, read by a second
-- semi-join, made those dashboards 90 ms slower on a 10M-event tenant). Its projection
-- day_sums, per project, day and bot flag, answers the unfiltered dashboard's sums with a few
-- rows per day (as schema 007's ends_daily_bots). sessions_daily stays, written as before, for
-- the queries that read it.
--
-- Filled from events once, on the migration that creates it (only while it is empty, before its
-- view exists, so no event is counted twice), and by its view after that.

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS duration_digits UInt64 MATERIALIZED toUInt64OrZero(trim(TRAILING '0' FROM replaceOne(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1], '.', ''))) COMMENT 'the significand of duration_ms written as its shortest decimal, without trailing zeros: duration_ms = duration_digits * 10^duration_exponent exactly, as sent (0 without a stated duration)';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS duration_exponent Int16 MATERIALIZED if(trim(TRAILING '0' FROM replaceOne(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1], '.', '')) = '', toInt16(0), toInt16(toInt16OrZero(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[2]) - if(position(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1], '.') = 0, 0, length(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1]) - position(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1], '.')) + length(replaceOne(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1], '.', '')) - length(trim(TRAILING '0' FROM replaceOne(splitByChar('e', toString(abs(ifNull(duration_ms, 0))))[1], '.', ''))))) COMMENT 'the power of ten of duration_ms: duration_ms = duration_digits * 10^duration_exponent exactly, as sent (0 without a stated duration)';

ALTER TABLE ${db}.events MATERIALIZE COLUMN duration_digits SETTINGS mutations_sync = 0;

ALTER TABLE ${db}.events MATERIALIZE COLUMN duration_exponent SETTINGS mutations_sync = 0;

CREATE TABLE IF NOT EXISTS ${db}.session_days
(
    project_id     LowCardinality(String),
    day            Date,
    session_hash   UInt64 COMMENT 'sipHash64(session_id); 0 for events without a session id',
    is_bot         UInt8 COMMENT '1: events flagged as bots',
    events         SimpleAggregateFunction(sum, UInt64),
    pageviews      SimpleAggregateFunction(sum, UInt64),
    first_at       SimpleAggregateFunction(min, DateTime64(3, 'UTC')) COMMENT 'first event that day',
    ends           SimpleAggregateFunction(sum, UInt64) COMMENT 'session_end events',
    ends_stated    SimpleAggregateFunction(sum, UInt64) COMMENT 'session_end events whose metadata.durationMs is a number >= 0 (events.duration_ms not NULL)',
    stated_scaled  SimpleAggregateFunction(sum, UInt256) COMMENT 'their durations with events.duration_exponent -20..19, summed in units of 10^-20 ms: sum(duration_digits * 10^(duration_exponent + 20))',
    stated_outside SimpleAggregateFunction(groupArrayArray, Array(Tuple(Int16, UInt256))) COMMENT 'their other durations, each (events.duration_exponent, events.duration_digits): the stated total is stated_scaled / 10^20 + the sum of digits * 10^exponent over these',
    unstated_at_ms SimpleAggregateFunction(sum, Int64) COMMENT 'sum of the epoch-ms times of the other session_end events'
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, day, session_hash, is_bot)
SETTINGS non_replicated_deduplication_window = 1000, deduplicate_merge_projection_mode = 'rebuild';

-- Per project, day and bot flag: session_end events, the sum of the epoch-ms times of those
-- without a stated duration that belong to a session (Int128: no overflow), and the stated
-- durations. Added while the table is empty, so every part has it.
ALTER TABLE ${db}.session_days ADD PROJECTION IF NOT EXISTS day_sums
(
    SELECT project_id, day, is_bot, sum(ends), sumIf(toInt128(unstated_at_ms), session_hash != 0),
           sum(stated_scaled), groupArrayArray(stated_outside)
    GROUP BY project_id, day, is_bot
);

INSERT INTO ${db}.session_days (project_id, day, session_hash, is_bot, events, pageviews, first_at,
    ends, ends_stated, stated_scaled, stated_outside, unstated_at_ms)
SELECT project_id, toDate(occurred_at) AS day,
       if(session_id = '', toUInt64(0), sipHash64(session_id)) AS session_hash,
       is_bot,
       count() AS events,
       countIf(name = 'pageview') AS pageviews,
       min(occurred_at) AS first_at,
       countIf(name = 'session_end') AS ends,
       countIf(name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated,
       sum(if(duration_exponent BETWEEN -20 AND 19 AND name = 'session_end', toUInt256(duration_digits) * CAST(arrayMap(i -> concat('1', repeat('0', i)), range(40)), 'Array(UInt256)')[duration_exponent + 21], 0)) AS stated_scaled,
       groupArrayIf((duration_exponent, toUInt256(duration_digits)), NOT (duration_exponent BETWEEN -20 AND 19) AND name = 'session_end') AS stated_outside,
       sumIf(toUnixTimestamp64Milli(occurred_at), name = 'session_end' AND duration_ms IS NULL) AS unstated_at_ms
FROM ${db}.events
WHERE (SELECT count() FROM ${db}.session_days) = 0
GROUP BY project_id, day, session_hash, is_bot;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.session_days_mv TO ${db}.session_days AS
SELECT project_id, toDate(occurred_at) AS day,
       if(session_id = '', toUInt64(0), sipHash64(session_id)) AS session_hash,
       is_bot,
       count() AS events,
       countIf(name = 'pageview') AS pageviews,
       min(occurred_at) AS first_at,
       countIf(name = 'session_end') AS ends,
       countIf(name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated,
       sum(if(duration_exponent BETWEEN -20 AND 19 AND name = 'session_end', toUInt256(duration_digits) * CAST(arrayMap(i -> concat('1', repeat('0', i)), range(40)), 'Array(UInt256)')[duration_exponent + 21], 0)) AS stated_scaled,
       groupArrayIf((duration_exponent, toUInt256(duration_digits)), NOT (duration_exponent BETWEEN -20 AND 19) AND name = 'session_end') AS stated_outside,
       sumIf(toUnixTimestamp64Milli(occurred_at), name = 'session_end' AND duration_ms IS NULL) AS unstated_at_ms
FROM ${db}.events
GROUP BY project_id, day, session_hash, is_bot;
