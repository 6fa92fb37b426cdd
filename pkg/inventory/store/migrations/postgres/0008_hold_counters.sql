-- Nothing on PostgreSQL. SQLite's 0008 gives a claim and a release one
-- trigger and two plain UPDATEs for its row-level counters; here migration
-- 0004's statement-level trigger already writes a claim's counters in one
-- statement, and 0007's per-GPU counters are SQLite's only (the picker
-- reads a summary by window functions, pickread.go). The file exists
-- because both dialects number the same migrations (TestLoadMigrations).
SELECT 1;
