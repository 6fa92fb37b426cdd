-- Attach throughput (issue 22, round 2): the counters of 0004 no longer
-- hold a hot row across a commit.
--
-- Before, every claim and release added to the same few counter rows (one
-- per stripe, dev_type, model, flags and held) and kept them locked until
-- its COMMIT, fsync included: on PostgreSQL the attaches and detaches of a
-- stripe's hosts waited for each other's commits. Now a write only appends
-- its changes (delta rows, one per key it changes, never updated: nothing
-- for another writer to wait on), and the totals are the folded counters
-- plus the deltas, read together from one snapshot: as exact as COUNT(*),
-- as before. isolated_device_counts keeps its name and shape as a view.
--
-- The deltas are folded into the counters by the writes themselves, one
-- in every 256 deltas or so: the fold deletes the deltas it sees
-- (committed ones; another transaction's uncommitted deltas stay for a
-- later fold) and adds them to the counters in the same statement, so no
-- delta is counted twice or lost. At most one fold runs at a time (a
-- transaction-scoped advisory lock that a second fold does not wait for:
-- it skips), so only that transaction holds counter rows until its commit,
-- and no other write needs them.
ALTER TABLE isolated_device_counts RENAME TO isolated_device_counts_folded;

-- No index: an append touches the heap alone (the least WAL per write),
-- and the table holds few rows between folds (about 256 and those of
-- transactions still open), which the readers and the fold scan.
CREATE TABLE isolated_device_counts_deltas (
    id              BIGSERIAL,
    stripe          TEXT COLLATE "C" NOT NULL,
    dev_type        TEXT COLLATE "C" NOT NULL,
    model           TEXT COLLATE "C" NOT NULL,
    unhealthy       BOOLEAN NOT NULL,
    pending_removal BOOLEAN NOT NULL,
    held            BOOLEAN NOT NULL,
    n               BIGINT NOT NULL
);

CREATE VIEW isolated_device_counts AS
SELECT stripe, dev_type, model, unhealthy, pending_removal, held, SUM(n)::BIGINT AS n
FROM (
    SELECT stripe, dev_type, model, unhealthy, pending_removal, held, n FROM isolated_device_counts_folded
    UNION ALL
    SELECT stripe, dev_type, model, unhealthy, pending_removal, held, n FROM isolated_device_counts_deltas
) AS c
GROUP BY stripe, dev_type, model, unhealthy, pending_removal, held;

-- isolated_device_counts_fold adds the committed deltas to the counters,
-- unless another fold runs (then the next one will).
CREATE FUNCTION isolated_device_counts_fold() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('isolated_device_counts_fold')) THEN
        RETURN;
    END IF;
    WITH d AS (DELETE FROM isolated_device_counts_deltas RETURNING stripe, dev_type, model, unhealthy, pending_removal, held, n)
    INSERT INTO isolated_device_counts_folded AS c (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    SELECT stripe, dev_type, model, unhealthy, pending_removal, held, SUM(n)
    FROM d
    GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (stripe, dev_type, model, unhealthy, pending_removal, held) DO UPDATE SET n = c.n + EXCLUDED.n;
END
$$;

-- The trigger function of 0004, appending instead of adding in place; the
-- triggers of 0004 call it by name and stay as they are.
CREATE OR REPLACE FUNCTION isolated_device_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    appended BIGINT;
    last     BIGINT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO isolated_device_counts_deltas (stripe, dev_type, model, unhealthy, pending_removal, held, n)
        SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', COUNT(*)
        FROM new_rows
        GROUP BY 1, 2, 3, 4, 5, 6;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO isolated_device_counts_deltas (stripe, dev_type, model, unhealthy, pending_removal, held, n)
        SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', -COUNT(*)
        FROM old_rows
        GROUP BY 1, 2, 3, 4, 5, 6;
    ELSE
        INSERT INTO isolated_device_counts_deltas (stripe, dev_type, model, unhealthy, pending_removal, held, n)
        SELECT stripe, dev_type, model, unhealthy, pending_removal, held, SUM(delta)
        FROM (
            SELECT substr(host_id, 1, 1) AS stripe, dev_type, model, unhealthy, pending_removal,
                   guest_id <> '' AS held, -1 AS delta
            FROM old_rows
            UNION ALL
            SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', 1
            FROM new_rows
        ) AS changes
        GROUP BY 1, 2, 3, 4, 5, 6 HAVING SUM(delta) <> 0;
    END IF;
    GET DIAGNOSTICS appended = ROW_COUNT;
    -- A fold when this statement's deltas crossed a multiple of 256 ids:
    -- one in about every 256 deltas. The sequence is not transactional,
    -- so concurrent writers do not wait on it either.
    IF appended > 0 THEN
        last := currval('isolated_device_counts_deltas_id_seq');
        IF last / 256 <> (last - appended) / 256 THEN
            PERFORM isolated_device_counts_fold();
        END IF;
    END IF;
    RETURN NULL;
END
$$;
