-- Tally schema 006: a project's time zone and bot rule, and its deletion.
-- A change is a new version of the project's row (ReplacingMergeTree keeps the highest), so
-- projects written before this migration read with the defaults: UTC, bots left out, not deleted.

ALTER TABLE ${db}.projects ADD COLUMN IF NOT EXISTS timezone String DEFAULT 'UTC' COMMENT 'IANA time zone of the project''s days and hours (Europe/Berlin)';

ALTER TABLE ${db}.projects ADD COLUMN IF NOT EXISTS exclude_bots UInt8 DEFAULT 1 COMMENT '1: events flagged is_bot are left out of the numbers';

ALTER TABLE ${db}.projects ADD COLUMN IF NOT EXISTS deleted_at Nullable(DateTime64(3, 'UTC')) COMMENT 'set when the project was deleted (its events and rollup rows are deleted then)';
