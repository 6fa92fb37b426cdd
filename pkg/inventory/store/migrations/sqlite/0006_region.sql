-- mps-inventory as a small Cloudpods region (issue 15).
--
-- 1. The isolated device fields Cloudpods' host agent sends and its climc
-- shows: sharing_mode (EXCLUSIVE, MPS, ...; '' when the client sends none,
-- as our daemon and Cloudpods 4.0.3 do), hot_pluggable, virtual_num (how
-- many guests may share the row; 1, as Cloudpods defaults it), memory_size
-- (MiB, 0 unknown), and update_version (Cloudpods' count of a row's
-- updates, shown by climc).
ALTER TABLE isolated_devices ADD COLUMN sharing_mode TEXT NOT NULL DEFAULT '';
ALTER TABLE isolated_devices ADD COLUMN hot_pluggable INTEGER NOT NULL DEFAULT 0 CHECK (hot_pluggable IN (0, 1));
ALTER TABLE isolated_devices ADD COLUMN virtual_num INTEGER NOT NULL DEFAULT 1;
ALTER TABLE isolated_devices ADD COLUMN memory_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE isolated_devices ADD COLUMN update_version INTEGER NOT NULL DEFAULT 0;

-- 2. Devices are found by name as well as by id (climc looks a name up
-- with ?name=X when GET /isolated_devices/X answers 404); rows older than
-- this migration keep their empty name.
CREATE INDEX isolated_devices_name ON isolated_devices (name);

-- 3. A host agent finds its host record by the MAC of its access interface
-- (GET /hosts?any_mac=...).
ALTER TABLE hosts ADD COLUMN access_mac TEXT NOT NULL DEFAULT '';
CREATE INDEX hosts_access_mac ON hosts (access_mac);

-- 4. Keystone tokens: what POST /v3/auth/tokens hands out (X-Subject-Token)
-- for an API token presented as a password (or as a token). A keystone
-- token is mpsk_<id>_<secret>; as for API tokens only the SHA-256 of the
-- secret is kept. It acts with its API token's role and host, expires at
-- expires_at, and goes with its API token when that is revoked.
CREATE TABLE keystone_tokens (
    id            TEXT PRIMARY KEY,
    api_token_id  TEXT NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    secret_sha256 TEXT NOT NULL,
    project       TEXT NOT NULL DEFAULT '',
    methods       TEXT NOT NULL DEFAULT '',
    created_at    TEXT NOT NULL,
    expires_at    TEXT NOT NULL
);
CREATE INDEX keystone_tokens_api_token_id ON keystone_tokens (api_token_id);
CREATE INDEX keystone_tokens_expires_at ON keystone_tokens (expires_at);
