-- Tally schema 001: the raw events table, the source of truth that every rollup derives from.
-- Statements are separated by lines that end in ';'. ${db} is replaced by the configured database.
-- Every statement is idempotent (IF NOT EXISTS), so applying the file twice changes nothing.

-- What happened, when, where and to whom: one row per accepted event.
CREATE TABLE IF NOT EXISTS ${db}.events
(
    project_id   LowCardinality(String)       COMMENT 'project the event was sent to (24 hex)',
    event_id     UUID DEFAULT generateUUIDv4() COMMENT 'assigned by Tally at ingestion',
    name         LowCardinality(String)       COMMENT 'event name; pageview and session_end have meaning',
    occurred_at  DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)) COMMENT 'client time, or receipt time when absent or in the future',
    received_at  DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)) COMMENT 'time Tally received the request',
    path         String CODEC(ZSTD(1)),
    url          String CODEC(ZSTD(1)),
    referrer     String CODEC(ZSTD(1)),
    session_id   String CODEC(ZSTD(1)),
    visitor_id   String CODEC(ZSTD(1)),
    browser      LowCardinality(String)       COMMENT 'metadata.browser, else derived from user_agent',
    os           LowCardinality(String)       COMMENT 'metadata.os, else derived from user_agent',
    device_type  LowCardinality(String)       COMMENT 'metadata.deviceType, else derived from user_agent',
    duration_ms  Nullable(Float64)            COMMENT 'metadata.durationMs when it is a number >= 0',
    metadata     String CODEC(ZSTD(1))        COMMENT 'metadata object as JSON text',
    ip           String CODEC(ZSTD(1))        COMMENT 'client IP (first x-forwarded-for address, else peer)',
    user_agent   String CODEC(ZSTD(1)),
    key_id       LowCardinality(String)       COMMENT 'id of the API key that sent it'
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(occurred_at)
ORDER BY (project_id, occurred_at)
-- The window lets a retried INSERT carrying the same insert_deduplication_token be dropped.
SETTINGS non_replicated_deduplication_window = 1000;
