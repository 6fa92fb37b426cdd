-- PostgreSQL counterpart of migrations/sqlite/0007_gpu_free.sql (read its
-- comments first): nothing changes here. On PostgreSQL the picker locks the
-- host's row and has the database compute the per-GPU summary of the free
-- rows in the same transaction (window functions over a range of the pick
-- index, see pickread.go); per-GPU counters would be one more hot row
-- locked until the end of every attach and detach, as migration 0004's
-- counters already are. The file exists so that both backends keep the
-- same list of migrations.
SELECT 1;
