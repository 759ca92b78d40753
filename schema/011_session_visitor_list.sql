-- Tally schema 011: each session's visitors as a plain array in sessions_quarter.
--
-- A session-dimension breakdown merges each session's buckets in the window (query/breakdown.py).
-- Its visitor set was read from the groupUniqArray state column `visitors` (schema 008), a state
-- object to build per row: on a 10M-event tenant over 90 days (2M rows) that was about a third
-- of the breakdown's time. `visitor_list` holds the same set as a plain Array(UInt64) that
-- ClickHouse merges by groupUniqArrayArray (the union of the arrays), read as a column.
--
-- DEFAULT finalizeAggregation(visitors): rows written before this migration read it from their
-- state (the same values, computed on read) until their parts merge, or once
-- `ALTER TABLE <db>.sessions_quarter MATERIALIZE COLUMN visitor_list` has run
-- (docs/operations.md, "Schema upgrades"); the view keeps writing `visitors`, and each new row
-- gets its list from it the same way, so the two always hold the same set.

ALTER TABLE ${db}.sessions_quarter ADD COLUMN IF NOT EXISTS visitor_list SimpleAggregateFunction(groupUniqArrayArray, Array(UInt64)) DEFAULT finalizeAggregation(visitors) COMMENT 'the same set as visitors, as an array: sipHash64 of the non-empty visitor ids' AFTER visitors;
