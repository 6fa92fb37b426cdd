-- Device state for allocation (issue 3).
--
-- unhealthy: set by the host while the GPU's MPS is not serving; such a
-- device is not handed out. pending_removal: the host no longer wants the
-- device but a guest still holds it; it is not handed out again, and the
-- host's next sync after the detach deletes it. SQLite has no boolean type:
-- 0/1, kept to those two values by the CHECKs (the store scans them into
-- Go bools).
ALTER TABLE isolated_devices ADD COLUMN unhealthy INTEGER NOT NULL DEFAULT 0 CHECK (unhealthy IN (0, 1));
ALTER TABLE isolated_devices ADD COLUMN pending_removal INTEGER NOT NULL DEFAULT 0 CHECK (pending_removal IN (0, 1));

-- The picker of POST /servers/{guest}/attach-isolated-device reads every
-- row of one (host, dev_type, model): equality on this index's first three
-- columns. guest_id last serves the same filters plus --unused / --server.
CREATE INDEX isolated_devices_pick ON isolated_devices (host_id, dev_type, model, guest_id);
