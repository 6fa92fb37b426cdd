-- Attach throughput (issue 22, round 4): the counters' update trigger of
-- 0004 and 0008 becomes a row-level trigger.
--
-- A claim or a release changes one row's guest_id (held, the key's last
-- column). The statement-level trigger, for every UPDATE of the table,
-- copied the statement's old and new rows into two transition tables and
-- then ran one INSERT ... SELECT over their UNION ALL, grouped and
-- filtered by HAVING, even when no row matched (a detach that finds its
-- device free). In the attach loader's runs its function took about a
-- tenth of PostgreSQL's CPU (docs/benchmarks.md, round 4). The row-level
-- trigger below runs for each row an UPDATE of a counted column changes;
-- when the row's key (stripe, dev_type, model, unhealthy, pending_removal,
-- held) differs between the old and the new row, it appends two delta rows,
-- -1 for the old key and +1 for the new one, else nothing. (The test is in
-- the function, not in a WHEN clause: PostgreSQL reads a trigger's WHEN
-- from its stored text again for every statement (stringToNode showed in
-- the profile), and on a claim or a release, whose key always changes, a
-- WHEN saves no call.)
--
-- The view isolated_device_counts sums the deltas as before, so the totals
-- stay as exact as COUNT(*) (counts_test.go); an UPDATE of several rows
-- appends two deltas per row whose key changed instead of one per key,
-- which the fold of 0008 (one write in about 256 deltas) adds up the same
-- way. The INSERT and DELETE triggers of 0004 stay statement-level: a
-- host's sync inserts its devices in one statement.
--
-- Lock order is unchanged: AFTER ROW triggers run at the end of their
-- statement, once it has locked and updated all its rows, so a fold (the
-- only writer of counter rows) still comes after the device rows.
CREATE FUNCTION isolated_device_counts_move() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    last BIGINT;
BEGIN
    IF (substr(OLD.host_id, 1, 1), OLD.dev_type, OLD.model, OLD.unhealthy, OLD.pending_removal, OLD.guest_id <> '')
        IS NOT DISTINCT FROM
        (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '') THEN
        RETURN NULL;
    END IF;
    INSERT INTO isolated_device_counts_deltas (stripe, dev_type, model, unhealthy, pending_removal, held, n)
    VALUES (substr(OLD.host_id, 1, 1), OLD.dev_type, OLD.model, OLD.unhealthy, OLD.pending_removal, OLD.guest_id <> '', -1),
           (substr(NEW.host_id, 1, 1), NEW.dev_type, NEW.model, NEW.unhealthy, NEW.pending_removal, NEW.guest_id <> '', 1);
    -- A fold when these two deltas crossed a multiple of 256 ids, as in
    -- isolated_device_counts_apply (0008).
    last := currval('isolated_device_counts_deltas_id_seq');
    IF last / 256 <> (last - 2) / 256 THEN
        PERFORM isolated_device_counts_fold();
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER isolated_devices_count_update ON isolated_devices;
CREATE TRIGGER isolated_devices_count_update
    AFTER UPDATE OF host_id, dev_type, model, unhealthy, pending_removal, guest_id ON isolated_devices
    FOR EACH ROW EXECUTE FUNCTION isolated_device_counts_move();
