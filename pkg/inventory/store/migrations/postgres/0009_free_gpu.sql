-- Attach throughput (issue 22, round 4): the pick's summary reads an index
-- of the claimable rows per GPU instead of sorting a host's free rows.
--
-- The summary (pgPickSummaryQuery, pickread.go) needs, for a (host,
-- dev_type, model), each GPU's number of free slices and its first free
-- slices in seq order. It read them from isolated_devices_pick (0003), whose
-- free range holds every free row of the host in no useful order, then sorted
-- them by (device_path, seq) for two window functions: the largest statement
-- of a pair, about 0.4 ms of PostgreSQL's CPU on a host of 266 free slices
-- (docs/benchmarks.md, round 4). isolated_devices_free_gpu holds the
-- claimable rows (free, healthy, not pending removal: the pick's own
-- condition) in (device_path, seq) order within each (host, dev_type,
-- model): the counts per GPU are one ordered range of it (an index-only
-- scan where the pages are all visible), the first slices of each GPU a
-- seek. It is SQLite's index of the same name (0007) with the pick's whole
-- condition as its predicate and seq named (see 0004).
--
-- It replaces isolated_devices_pick on PostgreSQL, which only the summary
-- needed here (the list filters with a host are served by
-- isolated_devices_host_seq): a claim or a release changes guest_id, so
-- each added an entry to the pick index; a claim takes its row out of the
-- partial index (no entry), a release adds one. SQLite keeps its pick index
-- (its summary reads the guest's rows from it).
CREATE INDEX isolated_devices_free_gpu ON isolated_devices (host_id, dev_type, model, device_path, seq)
    WHERE guest_id = '' AND NOT unhealthy AND NOT pending_removal;
DROP INDEX isolated_devices_pick;
