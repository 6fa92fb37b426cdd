-- Nothing on SQLite: PostgreSQL's 0009 gives its pick's summary an index
-- of the claimable rows per GPU (the counterpart of SQLite's
-- isolated_devices_free_gpu of 0007) in place of its pick index. SQLite's
-- summary reads its per-GPU counters (0007) and keeps both indexes. The
-- file exists because both dialects number the same migrations
-- (TestLoadMigrations).
SELECT 1;
