-- Device state for allocation (issue 3).
--
-- unhealthy: set by the host while the GPU's MPS is not serving; such a
-- device is not handed out. pending_removal: the host no longer wants the
-- device but a guest still holds it; it is not handed out again, and the
-- host's next sync after the detach deletes it.
ALTER TABLE isolated_devices ADD COLUMN unhealthy BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE isolated_devices ADD COLUMN pending_removal BOOLEAN NOT NULL DEFAULT false;

-- The picker of POST /servers/{guest}/attach-isolated-device reads every
-- row of one (host, dev_type, model): equality on this index's first three
-- columns. guest_id last serves the same filters plus --unused / --server.
CREATE INDEX isolated_devices_pick ON isolated_devices (host_id, dev_type, model, guest_id);
