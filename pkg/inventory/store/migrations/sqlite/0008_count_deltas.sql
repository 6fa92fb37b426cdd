-- Nothing on SQLite: PostgreSQL's 0008 appends the counters' changes as
-- delta rows so that concurrent writers do not wait for each other's
-- commits on the counter rows; SQLite has one writer at a time, and its
-- row-level triggers of 0004 stay. The file exists because both dialects
-- number the same migrations (TestLoadMigrations).
SELECT 1;
