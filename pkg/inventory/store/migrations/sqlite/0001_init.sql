-- Hosts that register isolated devices.
CREATE TABLE hosts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    access_ip  TEXT NOT NULL DEFAULT '',
    host_type  TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- One row per isolated device (for MPS: one virtual device, a slice of a GPU).
-- seq is the creation order and gives lists a stable order; id is the public
-- identifier. The column for api.IsolatedDevice.Index is dev_index because
-- INDEX is a keyword in SQL.
CREATE TABLE isolated_devices (
    seq                   INTEGER PRIMARY KEY,
    id                    TEXT NOT NULL UNIQUE,
    name                  TEXT NOT NULL DEFAULT '',
    host_id               TEXT NOT NULL REFERENCES hosts (id),
    dev_type              TEXT NOT NULL,
    model                 TEXT NOT NULL DEFAULT '',
    addr                  TEXT NOT NULL,
    vendor_device_id      TEXT NOT NULL,
    mdev_id               TEXT NOT NULL DEFAULT '',
    device_path           TEXT NOT NULL DEFAULT '',
    render_path           TEXT NOT NULL DEFAULT '',
    numa_node             INTEGER NOT NULL DEFAULT -1,
    pcie_info             TEXT,
    dev_index             INTEGER NOT NULL DEFAULT -1,
    device_minor          INTEGER NOT NULL DEFAULT -1,
    mps_memory_limit      INTEGER NOT NULL DEFAULT 0,
    mps_memory_total      INTEGER NOT NULL DEFAULT 0,
    mps_thread_percentage INTEGER NOT NULL DEFAULT 0,
    guest_id              TEXT NOT NULL DEFAULT '',
    created_at            TEXT NOT NULL,
    updated_at            TEXT NOT NULL,
    -- A host's sync matches rows on (vendor_device_id, addr). This index also
    -- serves the host_id filter, host_id being its leading column.
    UNIQUE (host_id, vendor_device_id, addr)
);

CREATE INDEX isolated_devices_dev_type ON isolated_devices (dev_type);
CREATE INDEX isolated_devices_model ON isolated_devices (model);
CREATE INDEX isolated_devices_guest_id ON isolated_devices (guest_id);
CREATE INDEX isolated_devices_device_path ON isolated_devices (device_path);
