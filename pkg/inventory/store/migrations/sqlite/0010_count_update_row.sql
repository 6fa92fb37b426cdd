-- Nothing on SQLite: PostgreSQL's 0010 makes its counters' update trigger
-- a row-level one; SQLite's triggers of 0004 and 0007 are row-level
-- already. The file exists because both dialects number the same
-- migrations (TestLoadMigrations).
SELECT 1;
