-- PostgreSQL port of migrations/sqlite/0004_list_scale.sql (read its
-- comments first): listing at scale. What differs:
--   - indexes name seq explicitly (SQLite appends its rowid, PostgreSQL
--     does not), so 0001's single-column indexes are replaced by (x, seq);
--   - text columns are COLLATE "C" and flags BOOLEAN, as in 0001 and 0003;
--   - the counters are kept by one statement-level trigger per operation,
--     which reads the statement's changed rows (transition tables) and
--     applies one delta per key. The deltas are applied in key order, so two
--     transactions take the counter rows' locks in the same order and
--     cannot deadlock on them; held is the key's last column, so a statement
--     that frees or takes devices of several (stripe, dev_type, model)
--     groups locks their rows in one ascending sequence. (The store also
--     writes every multi-device change as one statement: see release.go.)

-- 1. Indexes: every list filter climc offers reads its page in seq order.
DROP INDEX isolated_devices_dev_type;
DROP INDEX isolated_devices_model;
DROP INDEX isolated_devices_guest_id;
DROP INDEX isolated_devices_device_path;
CREATE INDEX isolated_devices_dev_type ON isolated_devices (dev_type, seq);
CREATE INDEX isolated_devices_model ON isolated_devices (model, seq);
CREATE INDEX isolated_devices_guest_id ON isolated_devices (guest_id, seq);
CREATE INDEX isolated_devices_device_path ON isolated_devices (device_path, seq);
CREATE INDEX isolated_devices_host_seq ON isolated_devices (host_id, seq);
CREATE INDEX isolated_devices_free_model ON isolated_devices (model, seq) WHERE guest_id = '';
CREATE INDEX isolated_devices_unhealthy ON isolated_devices (seq) WHERE unhealthy;
CREATE INDEX isolated_devices_pending_removal ON isolated_devices (seq) WHERE pending_removal;

-- 2. Exact totals from counters.
CREATE TABLE isolated_device_counts (
    stripe          TEXT COLLATE "C" NOT NULL,
    dev_type        TEXT COLLATE "C" NOT NULL,
    model           TEXT COLLATE "C" NOT NULL,
    unhealthy       BOOLEAN NOT NULL,
    pending_removal BOOLEAN NOT NULL,
    held            BOOLEAN NOT NULL,
    -- No CHECK (n >= 0) as on SQLite: PostgreSQL checks the row an upsert
    -- proposes before it finds the conflict, and the trigger proposes the
    -- (negative) delta of a key. The store's tests compare the counters
    -- with COUNT(*) instead.
    n               BIGINT NOT NULL,
    PRIMARY KEY (stripe, dev_type, model, unhealthy, pending_removal, held)
);

INSERT INTO isolated_device_counts (stripe, dev_type, model, unhealthy, pending_removal, held, n)
SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', COUNT(*)
FROM isolated_devices
GROUP BY 1, 2, 3, 4, 5, 6;

-- isolated_device_counts_apply adds, per key, the statement's new rows and
-- subtracts its old rows (a row whose key did not change nets 0 and is not
-- written). TG_OP says which transition tables exist.
CREATE FUNCTION isolated_device_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO isolated_device_counts AS c (stripe, dev_type, model, unhealthy, pending_removal, held, n)
        SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', COUNT(*)
        FROM new_rows
        GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO isolated_device_counts AS c (stripe, dev_type, model, unhealthy, pending_removal, held, n)
        SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', -COUNT(*)
        FROM old_rows
        GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSE
        INSERT INTO isolated_device_counts AS c (stripe, dev_type, model, unhealthy, pending_removal, held, n)
        SELECT stripe, dev_type, model, unhealthy, pending_removal, held, SUM(delta)
        FROM (
            SELECT substr(host_id, 1, 1) AS stripe, dev_type, model, unhealthy, pending_removal,
                   guest_id <> '' AS held, -1 AS delta
            FROM old_rows
            UNION ALL
            SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', 1
            FROM new_rows
        ) AS changes
        GROUP BY 1, 2, 3, 4, 5, 6 HAVING SUM(delta) <> 0 ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = c.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER isolated_devices_count_insert AFTER INSERT ON isolated_devices
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION isolated_device_counts_apply();
CREATE TRIGGER isolated_devices_count_update AFTER UPDATE ON isolated_devices
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION isolated_device_counts_apply();
CREATE TRIGGER isolated_devices_count_delete AFTER DELETE ON isolated_devices
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION isolated_device_counts_apply();
