-- Tokens cached across syncs (issue 41).
--
-- Every request presents a token, and at 100,000 hosts that sync every
-- 30 s each host's token comes back only every 30 s: a cache entry that
-- lives one second (the bound on how late another process's revocation
-- may apply) never served one. A process now keeps a token it verified
-- for as long as it stays valid, and learns what other processes revoked
-- from this log instead, read about four times a second
-- (tokens_upkeep.go): every delete of a token, and every change of what
-- makes one valid, by any writer (`mps-inventory token revoke`, another
-- inventory, a SQL shell), appends the token's id here in the same
-- transaction. AUTOINCREMENT: a seq is never handed out again, even after
-- the rows before it are gone. The log keeps an hour; a process that has
-- not read it for half of that forgets every token it cached.
CREATE TABLE token_revocations (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    token_id   TEXT NOT NULL,
    revoked_at TEXT NOT NULL
);

CREATE TRIGGER api_tokens_revoked AFTER DELETE ON api_tokens
BEGIN
    DELETE FROM token_revocations WHERE revoked_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour');
    INSERT INTO token_revocations (token_id, revoked_at) VALUES (OLD.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
END;

CREATE TRIGGER api_tokens_changed AFTER UPDATE OF id, role, host_name, secret_sha256 ON api_tokens
BEGIN
    DELETE FROM token_revocations WHERE revoked_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour');
    INSERT INTO token_revocations (token_id, revoked_at) VALUES (OLD.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
END;

CREATE TRIGGER keystone_tokens_revoked AFTER DELETE ON keystone_tokens
BEGIN
    DELETE FROM token_revocations WHERE revoked_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour');
    INSERT INTO token_revocations (token_id, revoked_at) VALUES (OLD.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
END;

CREATE TRIGGER keystone_tokens_changed AFTER UPDATE OF id, api_token_id, secret_sha256, expires_at ON keystone_tokens
BEGIN
    DELETE FROM token_revocations WHERE revoked_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour');
    INSERT INTO token_revocations (token_id, revoked_at) VALUES (OLD.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
END;
