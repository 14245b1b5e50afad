-- Logical decoding messages of the capture's "message" combination (Avro), run after
-- changes.sql: transactional ones (alone, and inside a transaction that also changes a row),
-- a non-transactional one (no txId), text and binary content, an empty content. Debezium
-- writes each to <prefix>.message, keyed by its prefix.
\set ON_ERROR_STOP on
SELECT pg_logical_emit_message(true, 'audit', 'hello');
SELECT pg_logical_emit_message(false, 'audit', 'outside a transaction');
BEGIN;
INSERT INTO ri_full VALUES (90, 'with a message');
SELECT pg_logical_emit_message(true, 'app.events', '\x00ff10'::bytea);
COMMIT;
SELECT pg_logical_emit_message(true, 'empty', '');
