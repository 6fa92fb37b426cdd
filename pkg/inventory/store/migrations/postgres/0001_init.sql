-- PostgreSQL port of migrations/sqlite/0001_init.sql: the same tables,
-- columns, constraints and indexes, so the store's statements and the
-- answers are the same on both backends. What differs:
--   - timestamps are TIMESTAMPTZ (the store writes UTC with microseconds,
--     PostgreSQL's precision, and reads time.Time back);
--   - seq is an identity column (SQLite's INTEGER PRIMARY KEY is its rowid):
--     both hand out increasing numbers in insertion order;
--   - text columns the store compares or sorts are COLLATE "C": byte order,
--     as SQLite's default BINARY collation, whatever the database's locale,
--     so `ORDER BY name` lists hosts in the same order on both backends.

-- Hosts that register isolated devices.
CREATE TABLE hosts (
    id         TEXT COLLATE "C" PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL UNIQUE,
    access_ip  TEXT NOT NULL DEFAULT '',
    host_type  TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

-- One row per isolated device (for MPS: one virtual device, a slice of a GPU).
-- seq is the creation order and gives lists a stable order; id is the public
-- identifier. The column for api.IsolatedDevice.Index is dev_index because
-- INDEX is a keyword in SQL.
CREATE TABLE isolated_devices (
    seq                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                    TEXT COLLATE "C" NOT NULL UNIQUE,
    name                  TEXT COLLATE "C" NOT NULL DEFAULT '',
    host_id               TEXT COLLATE "C" NOT NULL REFERENCES hosts (id),
    dev_type              TEXT COLLATE "C" NOT NULL,
    model                 TEXT COLLATE "C" NOT NULL DEFAULT '',
    addr                  TEXT COLLATE "C" NOT NULL,
    vendor_device_id      TEXT COLLATE "C" NOT NULL,
    mdev_id               TEXT NOT NULL DEFAULT '',
    device_path           TEXT COLLATE "C" NOT NULL DEFAULT '',
    render_path           TEXT NOT NULL DEFAULT '',
    numa_node             INTEGER NOT NULL DEFAULT -1,
    pcie_info             TEXT,
    dev_index             INTEGER NOT NULL DEFAULT -1,
    device_minor          INTEGER NOT NULL DEFAULT -1,
    mps_memory_limit      INTEGER NOT NULL DEFAULT 0,
    mps_memory_total      INTEGER NOT NULL DEFAULT 0,
    mps_thread_percentage INTEGER NOT NULL DEFAULT 0,
    guest_id              TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at            TIMESTAMPTZ NOT NULL,
    updated_at            TIMESTAMPTZ NOT NULL,
    -- A host's sync matches rows on (vendor_device_id, addr). This index also
    -- serves the host_id filter, host_id being its leading column.
    UNIQUE (host_id, vendor_device_id, addr)
);

CREATE INDEX isolated_devices_dev_type ON isolated_devices (dev_type);
CREATE INDEX isolated_devices_model ON isolated_devices (model);
CREATE INDEX isolated_devices_guest_id ON isolated_devices (guest_id);
CREATE INDEX isolated_devices_device_path ON isolated_devices (device_path);
