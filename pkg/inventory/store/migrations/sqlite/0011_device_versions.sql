-- Host syncs that cost nothing when nothing changed (issue 41).
--
-- Every daemon syncs its host's rows every mps_sync_interval (30 s), and
-- almost every sync changes nothing. A host's rows carry a version that
-- the database itself keeps: any write of a row of the host (an insert, an
-- update, a delete; by this inventory, a guest's attach or detach, another
-- inventory, an operator's statement in a SQL shell) gives the host a new
-- version, in the writing transaction. A sync that last saw version V
-- asks "still V?" and is answered from this one row, without the host's
-- rows (GET /isolated_devices?devices_version=V, docs/inventory.md).
--
-- A version is a number of one counter for the whole database, never
-- handed out twice: two states of a host, or the states of two hosts,
-- never share a version, so a version another host had (or a stale one)
-- never matches. SQLite has one writer at a time, so the counter is a row
-- (isolated_device_version_counter) and the versions also grow in commit
-- order. Every host has its row, made with the host (a host row made by
-- hand gets one too); a host without one has no version to answer, and is
-- synced in full.
CREATE TABLE isolated_device_version_counter (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    n   INTEGER NOT NULL
);
INSERT INTO isolated_device_version_counter (one, n) SELECT 1, COUNT(*) FROM hosts;

CREATE TABLE isolated_device_versions (
    host_id TEXT PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
    version INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO isolated_device_versions (host_id, version)
SELECT id, ROW_NUMBER() OVER (ORDER BY id) FROM hosts;

CREATE TRIGGER hosts_device_version AFTER INSERT ON hosts
BEGIN
    UPDATE isolated_device_version_counter SET n = n + 1;
    INSERT INTO isolated_device_versions (host_id, version)
    VALUES (NEW.id, (SELECT n FROM isolated_device_version_counter))
    ON CONFLICT (host_id) DO UPDATE SET version = excluded.version;
END;

-- A host deleted goes with its version, also where foreign keys are off
-- (sqlite3's shell has them off unless told): a version row without its
-- host must not answer for it.
CREATE TRIGGER hosts_device_version_delete AFTER DELETE ON hosts
BEGIN
    DELETE FROM isolated_device_versions WHERE host_id = OLD.id;
END;

CREATE TRIGGER isolated_devices_version_insert AFTER INSERT ON isolated_devices
BEGIN
    UPDATE isolated_device_version_counter SET n = n + 1;
    INSERT INTO isolated_device_versions (host_id, version)
    VALUES (NEW.host_id, (SELECT n FROM isolated_device_version_counter))
    ON CONFLICT (host_id) DO UPDATE SET version = excluded.version;
END;

CREATE TRIGGER isolated_devices_version_delete AFTER DELETE ON isolated_devices
BEGIN
    UPDATE isolated_device_version_counter SET n = n + 1;
    INSERT INTO isolated_device_versions (host_id, version)
    VALUES (OLD.host_id, (SELECT n FROM isolated_device_version_counter))
    ON CONFLICT (host_id) DO UPDATE SET version = excluded.version;
END;

-- Any update, of any column: the sync answers the host's rows whole.
CREATE TRIGGER isolated_devices_version_update AFTER UPDATE ON isolated_devices
BEGIN
    UPDATE isolated_device_version_counter SET n = n + 1;
    INSERT INTO isolated_device_versions (host_id, version)
    VALUES (OLD.host_id, (SELECT n FROM isolated_device_version_counter))
    ON CONFLICT (host_id) DO UPDATE SET version = excluded.version;
END;

-- A row moved to another host (by hand: the API never moves one) changes
-- that host's rows too, with a number of its own.
CREATE TRIGGER isolated_devices_version_move AFTER UPDATE OF host_id ON isolated_devices
WHEN NEW.host_id IS NOT OLD.host_id
BEGIN
    UPDATE isolated_device_version_counter SET n = n + 1;
    INSERT INTO isolated_device_versions (host_id, version)
    VALUES (NEW.host_id, (SELECT n FROM isolated_device_version_counter))
    ON CONFLICT (host_id) DO UPDATE SET version = excluded.version;
END;
