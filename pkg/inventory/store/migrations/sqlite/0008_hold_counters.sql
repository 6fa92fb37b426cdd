-- Attach throughput (issue 22, round 2): a claim or a release (an update
-- that changes only whether a device has a guest) keeps both kinds of
-- counters with one trigger and two plain UPDATEs, instead of three
-- triggers of 0004 and 0007 and up to three statements, two of them upserts
-- (an INSERT that meets its conflict, then updates).
--
-- It can be two plain UPDATEs because the rows they change always exist
-- (the invariants below, kept from now on by the triggers of this file):
--
--   (a) for every isolated_device_counts row, the row of the same key with
--       the other held exists (0 when no device is in it), so a claim's -1
--       on held = 0 and +1 on held = 1 (or a release's, the other way)
--       are one UPDATE of the key's two rows;
--   (b) every device that is neither unhealthy nor pending removal has its
--       isolated_device_gpus row, held or not (0 when none is free), so a
--       release's +1 finds its row as a claim's -1 does.
--
-- Zero rows were already allowed (rows that fall to 0 stay) and are read as
-- nothing: the totals add n, the picker skips free = 0.

INSERT OR IGNORE INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
SELECT stripe, dev_type, model, unhealthy, pending_removal, 1 - held, 0 FROM isolated_device_counts;

INSERT OR IGNORE INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
SELECT DISTINCT host_id, dev_type, model, device_path, numa_node, sharing_mode, 0
FROM isolated_devices WHERE NOT unhealthy AND NOT pending_removal;

-- The claim and the release: the key columns (those of either counter's
-- key, and the flags that decide what is free) unchanged, the guest changed
-- from none to one or back. An UPDATE that does not set guest_id does not
-- run it (UPDATE OF), nor does one that changes a key column too (the
-- triggers below then move the device as before).
CREATE TRIGGER isolated_devices_hold
AFTER UPDATE OF guest_id ON isolated_devices
WHEN (OLD.guest_id = '') <> (NEW.guest_id = '')
  AND (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, NEW.unhealthy, NEW.pending_removal)
   IS (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode, OLD.unhealthy, OLD.pending_removal)
BEGIN
    UPDATE isolated_device_counts SET n = n + CASE WHEN held = (NEW.guest_id <> '') THEN 1 ELSE -1 END
    WHERE stripe = substr(NEW.host_id, 1, 1) AND dev_type = NEW.dev_type AND model = NEW.model
      AND unhealthy = NEW.unhealthy AND pending_removal = NEW.pending_removal AND held IN (0, 1);
    UPDATE isolated_device_gpus SET free = free + CASE WHEN NEW.guest_id = '' THEN 1 ELSE -1 END
    WHERE NOT NEW.unhealthy AND NOT NEW.pending_removal
      AND host_id = NEW.host_id AND dev_type = NEW.dev_type AND model = NEW.model
      AND device_path = NEW.device_path AND numa_node = NEW.numa_node AND sharing_mode = NEW.sharing_mode;
END;

-- 0004's and 0007's update triggers again, now only for an update that
-- sets a key column and changes one: with the key unchanged, a change of
-- guest is isolated_devices_hold's (same bodies as before).
DROP TRIGGER isolated_devices_count_update;
CREATE TRIGGER isolated_devices_count_update
AFTER UPDATE OF host_id, dev_type, model, device_path, numa_node, sharing_mode, unhealthy, pending_removal ON isolated_devices
WHEN (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, NEW.unhealthy, NEW.pending_removal)
   IS NOT (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode, OLD.unhealthy, OLD.pending_removal)
  AND (substr(OLD.host_id, 1, 1), OLD.dev_type, OLD.model, OLD.unhealthy, OLD.pending_removal, OLD.guest_id <> '')
  IS NOT (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '')
BEGIN
    UPDATE isolated_device_counts SET n = n - 1
    WHERE stripe = substr(OLD.host_id, 1, 1) AND dev_type = OLD.dev_type AND model = OLD.model
      AND unhealthy = OLD.unhealthy AND pending_removal = OLD.pending_removal AND held = (OLD.guest_id <> '');
    INSERT INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    VALUES (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '', 1)
    ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = n + 1;
END;

DROP TRIGGER isolated_devices_gpus_leave;
CREATE TRIGGER isolated_devices_gpus_leave
AFTER UPDATE OF host_id, dev_type, model, device_path, numa_node, sharing_mode, unhealthy, pending_removal ON isolated_devices
WHEN (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, NEW.unhealthy, NEW.pending_removal)
   IS NOT (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode, OLD.unhealthy, OLD.pending_removal)
  AND OLD.guest_id = '' AND NOT OLD.unhealthy AND NOT OLD.pending_removal
  AND NOT (NEW.guest_id = '' AND NOT NEW.unhealthy AND NOT NEW.pending_removal
    AND (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode)
     IS (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode))
BEGIN
    UPDATE isolated_device_gpus SET free = free - 1
    WHERE host_id = OLD.host_id AND dev_type = OLD.dev_type AND model = OLD.model
      AND device_path = OLD.device_path AND numa_node = OLD.numa_node AND sharing_mode = OLD.sharing_mode;
END;

DROP TRIGGER isolated_devices_gpus_enter;
CREATE TRIGGER isolated_devices_gpus_enter
AFTER UPDATE OF host_id, dev_type, model, device_path, numa_node, sharing_mode, unhealthy, pending_removal ON isolated_devices
WHEN (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, NEW.unhealthy, NEW.pending_removal)
   IS NOT (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode, OLD.unhealthy, OLD.pending_removal)
  AND NEW.guest_id = '' AND NOT NEW.unhealthy AND NOT NEW.pending_removal
  AND NOT (OLD.guest_id = '' AND NOT OLD.unhealthy AND NOT OLD.pending_removal
    AND (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode)
     IS (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode))
BEGIN
    INSERT INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
    VALUES (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, 1)
    ON CONFLICT (host_id, dev_type, model, device_path, numa_node, sharing_mode) DO UPDATE SET free = free + 1;
END;

-- The invariants (a) and (b) for a device inserted, or moved to another key:
-- the rows its next claim or release will change are made to exist (0 if
-- new; OR IGNORE leaves a counter that exists as it is, whichever of these
-- and the counting triggers SQLite runs first).
CREATE TRIGGER isolated_devices_hold_rows_insert AFTER INSERT ON isolated_devices
BEGIN
    INSERT OR IGNORE INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    VALUES (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id = '', 0);
    INSERT OR IGNORE INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
    SELECT NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, 0
    WHERE NOT NEW.unhealthy AND NOT NEW.pending_removal;
END;

CREATE TRIGGER isolated_devices_hold_rows_update
AFTER UPDATE OF host_id, dev_type, model, device_path, numa_node, sharing_mode, unhealthy, pending_removal ON isolated_devices
WHEN (NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, NEW.unhealthy, NEW.pending_removal)
   IS NOT (OLD.host_id, OLD.dev_type, OLD.model, OLD.device_path, OLD.numa_node, OLD.sharing_mode, OLD.unhealthy, OLD.pending_removal)
BEGIN
    INSERT OR IGNORE INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    VALUES (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id = '', 0);
    INSERT OR IGNORE INTO isolated_device_gpus (host_id, dev_type, model, device_path, numa_node, sharing_mode, free)
    SELECT NEW.host_id, NEW.dev_type, NEW.model, NEW.device_path, NEW.numa_node, NEW.sharing_mode, 0
    WHERE NOT NEW.unhealthy AND NOT NEW.pending_removal;
END;
