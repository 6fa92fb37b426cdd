-- PostgreSQL port of migrations/sqlite/0012_token_revocations.sql (read
-- its comments first). What differs: seq is a BIGSERIAL (a sequence never
-- hands a number out twice), revoked_at a TIMESTAMPTZ, and one trigger
-- function serves every table and operation.
CREATE TABLE token_revocations (
    seq        BIGSERIAL PRIMARY KEY,
    token_id   TEXT COLLATE "C" NOT NULL,
    revoked_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE FUNCTION token_revocations_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Rows another revocation is trimming are left to it (SKIP LOCKED):
    -- two revocations never wait for each other here.
    DELETE FROM token_revocations WHERE seq IN (
        SELECT seq FROM token_revocations WHERE revoked_at < now() - interval '1 hour'
        ORDER BY seq FOR UPDATE SKIP LOCKED);
    INSERT INTO token_revocations (token_id) VALUES (OLD.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER api_tokens_revoked AFTER DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION token_revocations_log();
CREATE TRIGGER api_tokens_changed AFTER UPDATE OF id, role, host_name, secret_sha256 ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION token_revocations_log();
CREATE TRIGGER keystone_tokens_revoked AFTER DELETE ON keystone_tokens
    FOR EACH ROW EXECUTE FUNCTION token_revocations_log();
CREATE TRIGGER keystone_tokens_changed AFTER UPDATE OF id, api_token_id, secret_sha256, expires_at ON keystone_tokens
    FOR EACH ROW EXECUTE FUNCTION token_revocations_log();
