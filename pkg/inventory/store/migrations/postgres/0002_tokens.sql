-- PostgreSQL port of migrations/sqlite/0002_tokens.sql: timestamps are
-- TIMESTAMPTZ and the id is COLLATE "C" (byte order, as in SQLite), as in
-- 0001.
--
-- Bearer tokens of the API. A token is mpsi_<id>_<secret>: id is public and
-- the lookup key, the secret is never stored, only its SHA-256 (hex), so a
-- copy of the database does not let anyone call the API.
-- role: admin (everything), host (its own host and that host's devices,
-- named by host_name), viewer (reads).
-- last_used_at is written at most once a minute per token, so that reads do
-- not turn into writes.
CREATE TABLE api_tokens (
    id            TEXT COLLATE "C" PRIMARY KEY,
    name          TEXT NOT NULL DEFAULT '',
    role          TEXT NOT NULL CHECK (role IN ('admin', 'host', 'viewer')),
    host_name     TEXT,
    secret_sha256 TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    last_used_at  TIMESTAMPTZ,
    -- A host token names its host; no other token does.
    CHECK ((role = 'host') = (host_name IS NOT NULL AND host_name <> ''))
);
