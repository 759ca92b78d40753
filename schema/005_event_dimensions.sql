-- Tally schema 005: where each visit came from, where the visitor was, and whether a bot sent it.
-- Computed by Tally at ingestion (service/tally/domain/) and stored, so that the dashboard and
-- analysts read the same values. Events stored before this migration carry the defaults: empty
-- acquisition values, an empty country and is_bot = 0.

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS source LowCardinality(String) DEFAULT '' COMMENT 'utm_source, else the known name of the referrer''s site, else its host; Direct / None without one';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS channel LowCardinality(String) DEFAULT '' COMMENT 'GA4 default channel group (Direct, Organic Search, Referral, ...)';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS utm_source String DEFAULT '' CODEC(ZSTD(1)) COMMENT 'utm_source of the url query';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS utm_medium String DEFAULT '' CODEC(ZSTD(1)) COMMENT 'utm_medium of the url query';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS utm_campaign String DEFAULT '' CODEC(ZSTD(1)) COMMENT 'utm_campaign of the url query';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS utm_content String DEFAULT '' CODEC(ZSTD(1)) COMMENT 'utm_content of the url query';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS utm_term String DEFAULT '' CODEC(ZSTD(1)) COMMENT 'utm_term of the url query';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS country LowCardinality(String) DEFAULT '' COMMENT 'ISO 3166-1 alpha-2 of the client IP, Unknown when it cannot tell';

ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS is_bot UInt8 DEFAULT 0 COMMENT '1 when the User-Agent is a known crawler, spider, monitor or headless browser';
