-- Tally schema 003: projects, API keys and key usage.
-- Rows are versioned; the highest version of an id is the current state (read with FINAL).

-- Which projects exist and who owns them?
CREATE TABLE IF NOT EXISTS ${db}.projects
(
    id         String COMMENT '24 hex characters',
    owner_id   String COMMENT 'sub claim of the owner''s session',
    name       String,
    created_at DateTime64(3, 'UTC'),
    version    UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (owner_id, id);

-- Which API keys exist, for which project, and are they revoked? Only a SHA-256 of each key is kept.
CREATE TABLE IF NOT EXISTS ${db}.api_keys
(
    id          String COMMENT '24 hex characters',
    project_id  String,
    key_hash    String COMMENT 'hex SHA-256 of the full key',
    key_preview String COMMENT 'first 7 characters, an ellipsis, the last 4',
    label       String,
    created_at  DateTime64(3, 'UTC'),
    revoked_at  Nullable(DateTime64(3, 'UTC')),
    updated_at  DateTime64(3, 'UTC'),
    version     UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (project_id, id);

-- When was each key last used to send events? (written in batches, may lag a few seconds)
CREATE TABLE IF NOT EXISTS ${db}.api_key_usage
(
    project_id   String,
    key_id       String,
    last_used_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(last_used_at)
ORDER BY (project_id, key_id);
