-- The decision ledger (PostgreSQL, shared by replicas). One row per answered or refused request; the
-- per-question detail (keyed hashes, probabilities) is one JSON document, so a row is
-- written whole or not at all.
CREATE TABLE decisions (
    request_id TEXT PRIMARY KEY NOT NULL,
    at_ms BIGINT NOT NULL,
    key_name TEXT NOT NULL,
    route TEXT NOT NULL,
    status BIGINT NOT NULL,
    code TEXT,
    model TEXT,
    latency_ms DOUBLE PRECISION NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    upstream_requests BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    body_hash TEXT,
    hash_key_id TEXT NOT NULL,
    record TEXT NOT NULL,
    inputs TEXT
);
CREATE INDEX decisions_at ON decisions (at_ms, request_id);
CREATE INDEX decisions_key_at ON decisions (key_name, at_ms, request_id);

-- Outcomes people recorded: one current row per (request, question); a replaced one keeps
-- its row with `replaced_at_ms` set.
CREATE TABLE outcomes (
    id BIGSERIAL PRIMARY KEY,
    request_id TEXT NOT NULL,
    question TEXT NOT NULL,
    outcome BIGINT NOT NULL,
    note TEXT,
    key_name TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    replaced_at_ms BIGINT
);
CREATE INDEX outcomes_request ON outcomes (request_id, question);
CREATE UNIQUE INDEX outcomes_current ON outcomes (request_id, question) WHERE replaced_at_ms IS NULL;
