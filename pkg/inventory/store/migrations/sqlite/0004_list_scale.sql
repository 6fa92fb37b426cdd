-- Listing at scale (issue 3): a page of GET /isolated_devices must cost
-- about the same at a thousand rows as at a million.
--
-- 1. Indexes that hand every list filter climc offers its rows in seq
-- order, so ORDER BY seq LIMIT n (OFFSET k, or seq >= marker) reads n (+k)
-- index entries and sorts nothing. SQLite appends the rowid (seq, the
-- INTEGER PRIMARY KEY) to every index: (x) is (x, seq), equality on x gives
-- seq order. 0001 has dev_type, model, guest_id (--server, and --unused:
-- guest_id = '') and device_path (--gpu); these add --host, --unused with
-- --model, and the rare flags (partial indexes, holding the few flagged
-- rows).
CREATE INDEX isolated_devices_host_seq ON isolated_devices (host_id);
CREATE INDEX isolated_devices_free_model ON isolated_devices (model) WHERE guest_id = '';
CREATE INDEX isolated_devices_unhealthy ON isolated_devices (seq) WHERE unhealthy;
CREATE INDEX isolated_devices_pending_removal ON isolated_devices (seq) WHERE pending_removal;

-- 2. Exact totals without counting a million rows. The answer's total is
-- COUNT(*) of the same filter; for the filters that match a large part of
-- the table (none, dev_type, model, unused, unhealthy, pending_removal:
-- those without a host, GPU, guest or addr, which bound the rows to one
-- host's) it is the sum of these counters instead: the devices per (stripe,
-- dev_type, model, unhealthy, pending_removal, held), kept by the triggers
-- below in the transaction of every insert, update and delete, so a total
-- is as exact as COUNT(*) and read from the same snapshot as its page.
--
-- stripe is the first hex digit of the host's id (a UUID): one model's
-- counter rows are spread over 16 rows, so on PostgreSQL, where a counter
-- row stays locked until its transaction ends, attaches on hosts of other
-- stripes do not wait for each other (on SQLite, one writer at a time, it
-- changes nothing), and the table stays at most 16 x models x 8 rows
-- whatever the number of devices. held is guest_id <> ''. Rows that fall
-- to 0 stay (they are few, and the next attach reuses them).
CREATE TABLE isolated_device_counts (
    stripe          TEXT NOT NULL,
    dev_type        TEXT NOT NULL,
    model           TEXT NOT NULL,
    unhealthy       INTEGER NOT NULL,
    pending_removal INTEGER NOT NULL,
    held            INTEGER NOT NULL,
    n               INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (stripe, dev_type, model, unhealthy, pending_removal, held)
);

INSERT INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', COUNT(*)
FROM isolated_devices
GROUP BY 1, 2, 3, 4, 5, 6;

CREATE TRIGGER isolated_devices_count_insert AFTER INSERT ON isolated_devices
BEGIN
    INSERT INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    VALUES (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '', 1)
    ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER isolated_devices_count_delete AFTER DELETE ON isolated_devices
BEGIN
    UPDATE isolated_device_counts SET n = n - 1
    WHERE stripe = substr(OLD.host_id, 1, 1) AND dev_type = OLD.dev_type AND model = OLD.model
      AND unhealthy = OLD.unhealthy AND pending_removal = OLD.pending_removal AND held = (OLD.guest_id <> '');
END;

-- Only when a counted property changes: most updates (a host's sync of
-- names and limits, updated_at) leave the counters alone.
CREATE TRIGGER isolated_devices_count_update
AFTER UPDATE OF host_id, dev_type, model, unhealthy, pending_removal, guest_id ON isolated_devices
WHEN (substr(OLD.host_id, 1, 1), OLD.dev_type, OLD.model, OLD.unhealthy, OLD.pending_removal, OLD.guest_id <> '')
  IS NOT (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '')
BEGIN
    UPDATE isolated_device_counts SET n = n - 1
    WHERE stripe = substr(OLD.host_id, 1, 1) AND dev_type = OLD.dev_type AND model = OLD.model
      AND unhealthy = OLD.unhealthy AND pending_removal = OLD.pending_removal AND held = (OLD.guest_id <> '');
    INSERT INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    VALUES (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '', 1)
    ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = n + 1;
END;
