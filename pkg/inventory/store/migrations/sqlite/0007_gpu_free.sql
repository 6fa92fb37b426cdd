-- Attach throughput (issue 22): the picker reads a summary per GPU instead
-- of every free row of a (host, dev_type, model).
--
-- 1. The free slices per GPU, kept by the triggers below in the transaction
-- of every insert, update and delete, so the picker's counts are as exact
-- as COUNT(*) of the rows: free means no guest, not unhealthy, not pending
-- removal. numa_node and sharing_mode are in the key because a pick may ask
-- for one of each (a GPU's slices normally share both, so it is one row per
-- GPU). Rows that fall to 0 stay (the next release reuses them).
CREATE TABLE isolated_device_gpus (
    host_id      TEXT NOT NULL,
    dev_type     TEXT NOT NULL,
    model        TEXT NOT NULL,
    device_path  TEXT NOT NULL,
    numa_node    INTEGER NOT NULL,
    sharing_mode TEXT NOT NULL,
    free         INTEGER NOT NULL CHECK (free >= 0),
    PRIMARY KEY (host_id, dev_type, model, device_path, numa_node, sharing_mode)
) WITHOUT ROWID;

INSERT INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
SELECT host_id, dev_type, model, device_path, numa_node, sharing_mode, COUNT(*)
FROM isolated_devices
WHERE guest_id = '' AND NOT unhealthy AND NOT pending_removal
GROUP BY 1, 2, 3, 4, 5, 6;

CREATE TRIGGER isolated_devices_gpus_insert AFTER INSERT ON isolated_devices
WHEN NEW.guest_id = '' AND NOT NEW.unhealthy AND NOT NEW.pending_removal
BEGIN
    INSERT INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
    VALUES (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, 1)
    ON CONFLICT (host_id, dev_type, model, device_path, numa_node, sharing_mode) DO UPDATE SET free = free + 1;
END;

CREATE TRIGGER isolated_devices_gpus_delete AFTER DELETE ON isolated_devices
WHEN OLD.guest_id = '' AND NOT OLD.unhealthy AND NOT OLD.pending_removal
BEGIN
    UPDATE isolated_device_gpus SET free = free - 1
    WHERE host_id = OLD.host_id AND dev_type = OLD.dev_type AND model = OLD.model
      AND device_path = OLD.device_path AND numa_node = OLD.numa_node AND sharing_mode = OLD.sharing_mode;
END;

-- An update leaves its old counter when the row was free and is no longer,
-- or moves to another key; it enters its new one in the opposite cases. A
-- claim is one decrement, a release one increment; an update of anything
-- else (names, limits, updated_at) runs neither.
CREATE TRIGGER isolated_devices_gpus_leave
AFTER UPDATE OF host_id, dev_type, model, device_path, numa_node, sharing_mode, guest_id, unhealthy, pending_removal ON isolated_devices
WHEN OLD.guest_id = '' AND NOT OLD.unhealthy AND NOT OLD.pending_removal
  AND NOT (NEW.guest_id = '' AND NOT NEW.unhealthy AND NOT NEW.pending_removal
    AND (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode)
     IS (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode))
BEGIN
    UPDATE isolated_device_gpus SET free = free - 1
    WHERE host_id = OLD.host_id AND dev_type = OLD.dev_type AND model = OLD.model
      AND device_path = OLD.device_path AND numa_node = OLD.numa_node AND sharing_mode = OLD.sharing_mode;
END;

CREATE TRIGGER isolated_devices_gpus_enter
AFTER UPDATE OF host_id, dev_type, model, device_path, numa_node, sharing_mode, guest_id, unhealthy, pending_removal ON isolated_devices
WHEN NEW.guest_id = '' AND NOT NEW.unhealthy AND NOT NEW.pending_removal
  AND NOT (OLD.guest_id = '' AND NOT OLD.unhealthy AND NOT OLD.pending_removal
    AND (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode)
     IS (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode))
BEGIN
    INSERT INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
    VALUES (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, 1)
    ON CONFLICT (host_id, dev_type, model, device_path, numa_node, sharing_mode) DO UPDATE SET free = free + 1;
END;

-- 2. The free rows of one GPU, in seq order (SQLite appends the rowid):
-- the picker reads a GPU's first free slices with a seek instead of
-- reading every free row. Partial, as isolated_devices_free_model: a claim
-- takes the row out, a release puts it back.
CREATE INDEX isolated_devices_free_gpu ON isolated_devices (host_id, dev_type, model, device_path) WHERE guest_id = '';
