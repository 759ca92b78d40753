-- Tally schema 012: a session's first values as numbers, and the names behind them.
--
-- A breakdown by a session dimension (source, channel, utm_*, entryPage, exitPage) merges each
-- session's rows of sessions_quarter in the window and takes its first value (its last, for the
-- exit page). Schema 008 keeps that value as an argMin state of a string and its time, a state
-- object the merge builds and compares per row and session: on a 10M-event tenant over 90 days
-- (2M rows, 1.5M sessions) that was more than half of the breakdown's time.
--
-- Each `<dimension>_first` column holds the same first value as one unsigned 128-bit number:
-- the event's time in its high 64 bits (epoch milliseconds shifted left by 20 bits, plus the
-- event's row number in its INSERT: events sent together, at the same millisecond, keep the order
-- they were sent in, the reference model's), cityHash64 of the value in the low 64 bits, kept by
-- min (exit_page_last: the last pageview's, by max). The smallest number is the earliest event's,
-- so min over a session's rows is its first value in the window. `toUInt64(x)` is the value's
-- hash. A row without a pageview holds the neutral number (the largest for min, 0 for max).
-- 44 bits of milliseconds last until the year 2527; rows past the 1,048,575th of one INSERT
-- share the last row number.
--
-- The session metrics of a filtered view (sessions, bounces, duration) need each session's
-- session_end events: `ends_unstated` holds those without a stated duration as (epoch ms << 64)
-- | sipHash64(event_id), `ends_stated` the others as (the Float64 bits of metadata.durationMs <<
-- 64) | sipHash64(event_id). Arrays merged by concatenation; a reader takes each array's
-- distinct elements, so an end event written twice (the backfill below beside the view) counts
-- once. With the first event's time (the high bits of source_first, shifted right by 84) they give
-- what the raw events give: sum of stated durations, plus each unstated end's time minus the
-- session's first event's.
--
-- session_values names the hashes: one row per project, dimension (`path` for the entry and exit
-- pages) and distinct value, with the latest time it was seen (ReplacingMergeTree on it, and the
-- retention TTL). A breakdown groups sessions by hash and looks up the names of the rows it
-- returns. Two different values with the same 64-bit hash would count as one: as for the visitor
-- hashes (sipHash64), about one chance in 10^8 for a million distinct values of one dimension.
--
-- Upgrade: the columns are added with the neutral number as default (rows written before read it
-- until the backfill's rows merge with them), the view writes them from then on, and one INSERT
-- from events adds them for everything stored before: rows with no events and no visitors whose
-- only effect is the min or max, so running it twice changes nothing (events stored before this
-- schema are numbered in their stored order). session_values: its view first, then the same
-- backfill (a value written twice is one row once merged; readers take any of its rows).

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS source_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the source of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS channel_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the channel of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS utm_source_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the utm_source of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS utm_medium_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the utm_medium of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS utm_campaign_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the utm_campaign of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS utm_content_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the utm_content of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS utm_term_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the utm_term of the first event: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS entry_page_first SimpleAggregateFunction(min, UInt128) DEFAULT toUInt128('340282366920938463463374607431768211455') COMMENT 'the path of the first pageview: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by min';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS exit_page_last SimpleAggregateFunction(max, UInt128) DEFAULT toUInt128(0) COMMENT 'the path of the last pageview: ((epoch ms << 20 | row in its INSERT) << 64) | cityHash64(value), by max';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS ends_unstated SimpleAggregateFunction(groupArrayArray, Array(UInt128)) DEFAULT [] COMMENT 'session_end events without metadata.durationMs: (epoch ms << 64) | sipHash64(event_id) each';

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS ends_stated SimpleAggregateFunction(groupArrayArray, Array(UInt128)) DEFAULT [] COMMENT 'session_end events with metadata.durationMs: (its Float64 bits << 64) | sipHash64(event_id) each';

ALTER TABLE ${db}.sessions_quarter_mv MODIFY QUERY
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
       argMaxStateIf(path, occurred_at, name = 'pageview') AS exit_page,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(toString(e.source))))) AS source_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(toString(e.channel))))) AS channel_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_source)))) AS utm_source_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_medium)))) AS utm_medium_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_campaign)))) AS utm_campaign_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_content)))) AS utm_content_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_term)))) AS utm_term_first,
       min(if(name = 'pageview', bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.path))), toUInt128('340282366920938463463374607431768211455'))) AS entry_page_first,
       max(if(name = 'pageview', bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.path))), toUInt128(0))) AS exit_page_last,
       groupArrayIf(bitOr(bitShiftLeft(toUInt128(toUnixTimestamp64Milli(occurred_at)), 64), toUInt128(sipHash64(toString(event_id)))), name = 'session_end' AND duration_ms IS NULL) AS ends_unstated,
       groupArrayIf(bitOr(bitShiftLeft(toUInt128(reinterpretAsUInt64(assumeNotNull(duration_ms))), 64), toUInt128(sipHash64(toString(event_id)))), name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated
FROM ${db}.events AS e
GROUP BY project_id, bucket, session_key, sessioned, is_bot;

INSERT INTO ${db}.sessions_quarter (project_id, bucket, session_key, sessioned, is_bot,
    source_first, channel_first, utm_source_first, utm_medium_first, utm_campaign_first, utm_content_first, utm_term_first, entry_page_first, exit_page_last, ends_unstated, ends_stated)
SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS bucket,
       if(session_id = '', sipHash64(toString(event_id)), sipHash64(session_id)) AS session_key,
       toUInt8(session_id != '') AS sessioned, is_bot,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(toString(e.source))))) AS source_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(toString(e.channel))))) AS channel_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_source)))) AS utm_source_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_medium)))) AS utm_medium_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_campaign)))) AS utm_campaign_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_content)))) AS utm_content_first,
       min(bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.utm_term)))) AS utm_term_first,
       min(if(name = 'pageview', bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.path))), toUInt128('340282366920938463463374607431768211455'))) AS entry_page_first,
       max(if(name = 'pageview', bitOr(bitShiftLeft(toUInt128(bitOr(bitShiftLeft(toUInt64(toUnixTimestamp64Milli(occurred_at)), 20), least(rowNumberInBlock(), 1048575))), 64), toUInt128(cityHash64(e.path))), toUInt128(0))) AS exit_page_last,
       groupArrayIf(bitOr(bitShiftLeft(toUInt128(toUnixTimestamp64Milli(occurred_at)), 64), toUInt128(sipHash64(toString(event_id)))), name = 'session_end' AND duration_ms IS NULL) AS ends_unstated,
       groupArrayIf(bitOr(bitShiftLeft(toUInt128(reinterpretAsUInt64(assumeNotNull(duration_ms))), 64), toUInt128(sipHash64(toString(event_id)))), name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated
FROM ${db}.events AS e
GROUP BY project_id, bucket, session_key, sessioned, is_bot;

CREATE TABLE IF NOT EXISTS ${db}.session_values
(
    project_id   LowCardinality(String),
    dimension    LowCardinality(String) COMMENT 'source, channel, utm_source, utm_medium, utm_campaign, utm_content, utm_term, or path (entry and exit pages)',
    value_hash   UInt64 COMMENT 'cityHash64(value): the low 64 bits of sessions_quarter.<dimension>_first',
    value        String,
    seen         DateTime('UTC') COMMENT 'the latest event with this value'
)
ENGINE = ReplacingMergeTree(seen)
ORDER BY (project_id, dimension, value_hash)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.session_values_mv TO ${db}.session_values AS
SELECT project_id, pair.1 AS dimension, cityHash64(pair.2) AS value_hash, pair.2 AS value,
       max(toDateTime(occurred_at, 'UTC')) AS seen
FROM ${db}.events
ARRAY JOIN [('source', toString(source)), ('channel', toString(channel)), ('utm_source', utm_source), ('utm_medium', utm_medium), ('utm_campaign', utm_campaign), ('utm_content', utm_content), ('utm_term', utm_term), ('path', path)] AS pair
WHERE value != ''
GROUP BY project_id, dimension, value_hash, value;

INSERT INTO ${db}.session_values (project_id, dimension, value_hash, value, seen)
SELECT project_id, pair.1 AS dimension, cityHash64(pair.2) AS value_hash, pair.2 AS value,
       max(toDateTime(occurred_at, 'UTC')) AS seen
FROM ${db}.events
ARRAY JOIN [('source', toString(source)), ('channel', toString(channel)), ('utm_source', utm_source), ('utm_medium', utm_medium), ('utm_campaign', utm_campaign), ('utm_content', utm_content), ('utm_term', utm_term), ('path', path)] AS pair
WHERE value != ''
GROUP BY project_id, dimension, value_hash, value;
