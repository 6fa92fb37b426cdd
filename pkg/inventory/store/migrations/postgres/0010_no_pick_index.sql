-- Nothing on PostgreSQL: SQLite's 0010 drops the pick index, which
-- PostgreSQL dropped in 0009. The file exists because both dialects number
-- the same migrations (TestLoadMigrations).
SELECT 1;
