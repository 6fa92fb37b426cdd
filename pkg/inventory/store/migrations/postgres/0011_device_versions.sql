-- PostgreSQL port of migrations/sqlite/0011_device_versions.sql (read its
-- comments first): a version per host that changes with every write of
-- one of the host's rows. What differs:
--   - the versions come from a sequence, so writers never wait on a
--     shared counter. A sequence is not transactional and hands out its
--     numbers in the order they are asked for, not in commit order: that
--     does not matter, since a version is only ever compared for equality
--     (a number is never handed out twice), and the host's row, locked by
--     the write that bumps it until its COMMIT, only ever moves to a
--     number its reader has not seen;
--   - one statement-level trigger per operation, as the counters of 0004:
--     one upsert per statement, whatever its rows, and the hosts' rows in
--     host_id order, so that two statements touching the rows of several
--     hosts lock their versions in the same order. Every writer locks the
--     device rows it changes before its statement ends (a multi-device
--     attach locks them all first, pgattach.go), so device rows always
--     come before version rows, as they come before counter rows;
--   - a statement that changes no row (a conditional UPDATE that lost a
--     race) bumps nothing.
CREATE SEQUENCE isolated_device_version_seq;

CREATE TABLE isolated_device_versions (
    host_id TEXT COLLATE "C" PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
    version BIGINT NOT NULL
);
INSERT INTO isolated_device_versions (host_id, version)
SELECT id, nextval('isolated_device_version_seq') FROM (SELECT id FROM hosts ORDER BY id) AS h;

CREATE FUNCTION isolated_device_versions_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO isolated_device_versions AS v (host_id, version)
        SELECT host_id, nextval('isolated_device_version_seq')
        FROM (SELECT DISTINCT host_id FROM new_rows) AS changed ORDER BY host_id
        ON CONFLICT (host_id) DO UPDATE SET version = EXCLUDED.version;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO isolated_device_versions AS v (host_id, version)
        SELECT host_id, nextval('isolated_device_version_seq')
        FROM (SELECT DISTINCT host_id FROM old_rows) AS changed ORDER BY host_id
        ON CONFLICT (host_id) DO UPDATE SET version = EXCLUDED.version;
    ELSE
        INSERT INTO isolated_device_versions AS v (host_id, version)
        SELECT host_id, nextval('isolated_device_version_seq')
        FROM (SELECT host_id FROM old_rows UNION SELECT host_id FROM new_rows) AS changed ORDER BY host_id
        ON CONFLICT (host_id) DO UPDATE SET version = EXCLUDED.version;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER isolated_devices_version_insert AFTER INSERT ON isolated_devices
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION isolated_device_versions_bump();
CREATE TRIGGER isolated_devices_version_update AFTER UPDATE ON isolated_devices
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION isolated_device_versions_bump();
CREATE TRIGGER isolated_devices_version_delete AFTER DELETE ON isolated_devices
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION isolated_device_versions_bump();

-- A host has its version from the start.
CREATE FUNCTION hosts_device_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO isolated_device_versions AS v (host_id, version)
    VALUES (NEW.id, nextval('isolated_device_version_seq'))
    ON CONFLICT (host_id) DO UPDATE SET version = EXCLUDED.version;
    RETURN NULL;
END
$$;
CREATE TRIGGER hosts_device_version AFTER INSERT ON hosts
    FOR EACH ROW EXECUTE FUNCTION hosts_device_version();
