-- PostgreSQL port of migrations/sqlite/0006_region.sql (read its comments
-- first). What differs: flags are BOOLEAN, timestamps TIMESTAMPTZ, compared
-- text COLLATE "C", and the name index names seq (see 0004).
ALTER TABLE isolated_devices ADD COLUMN sharing_mode TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE isolated_devices ADD COLUMN hot_pluggable BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE isolated_devices ADD COLUMN virtual_num INTEGER NOT NULL DEFAULT 1;
ALTER TABLE isolated_devices ADD COLUMN memory_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE isolated_devices ADD COLUMN update_version INTEGER NOT NULL DEFAULT 0;

CREATE INDEX isolated_devices_name ON isolated_devices (name, seq);

ALTER TABLE hosts ADD COLUMN access_mac TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX hosts_access_mac ON hosts (access_mac);

CREATE TABLE keystone_tokens (
    id            TEXT COLLATE "C" PRIMARY KEY,
    api_token_id  TEXT COLLATE "C" NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    secret_sha256 TEXT NOT NULL,
    project       TEXT NOT NULL DEFAULT '',
    methods       TEXT NOT NULL DEFAULT '',
    created_at    TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX keystone_tokens_api_token_id ON keystone_tokens (api_token_id);
CREATE INDEX keystone_tokens_expires_at ON keystone_tokens (expires_at);
