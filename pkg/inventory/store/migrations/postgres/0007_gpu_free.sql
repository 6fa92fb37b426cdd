-- PostgreSQL counterpart of migrations/sqlite/0007_gpu_free.sql (read its
-- comments first): nothing changes here. On PostgreSQL the picker locks the
-- rows it reads (FOR UPDATE, so that attaches on one (host, dev_type,
-- model) queue instead of racing, see alloc.go), so it reads the rows, not
-- a summary; per-GPU counters would also be one more row lock held to the
-- end of every attach and detach. The file exists so that both backends
-- keep the same list of migrations.
SELECT 1;
