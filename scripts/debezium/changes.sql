-- The streamed changes, run by scripts/debezium-capture after Debezium's initial snapshot has
-- finished. Deterministic: fixed values only.
\set ON_ERROR_STOP on
SET TimeZone = 'UTC';

-- Every scalar, special and array value again as a streamed insert (ids + 100), so each value
-- is seen both snapshotted (op r) and streamed (op c); then updates and deletes.
INSERT INTO scalars SELECT id + 100, c_bool, c_int2, c_int4, c_int8, c_oid, c_float4, c_float8, c_numeric,
  c_numeric_10_4, c_numeric_38_0, c_text, c_varchar, c_bpchar, c_char, c_name, c_xml, c_money, c_inet, c_cidr,
  c_macaddr, c_macaddr8, c_uuid, c_bytea, c_json, c_jsonb, c_date, c_time, c_time0, c_time3, c_time6, c_timetz,
  c_timestamp, c_timestamp0, c_timestamp3, c_timestamptz, c_timestamptz0, c_timestamptz3, c_interval
  FROM scalars ORDER BY id;
UPDATE scalars SET c_int4 = 4321, c_text = 'updated' WHERE id = 101;
UPDATE scalars SET c_int4 = NULL WHERE id = 104;
DELETE FROM scalars WHERE id = 102;

INSERT INTO specials SELECT id + 100, c_float4, c_float8, c_numeric, c_numeric_10_2, c_date, c_timestamp,
  c_timestamptz, c_interval FROM specials ORDER BY id;

INSERT INTO arrays SELECT id + 100, a_bool, a_int2, a_int4, a_int8, a_oid, a_float4, a_float8, a_numeric,
  a_numeric_5_2, a_text, a_varchar, a_bpchar, a_char, a_uuid, a_inet, a_cidr, a_macaddr, a_macaddr8, a_json,
  a_jsonb, a_bytea, a_date, a_time, a_timetz, a_timestamp, a_timestamptz, a_interval, a_money, a_name, a_xml,
  a_mood, a_int4_2d, a_int4_lb FROM arrays ORDER BY id;
UPDATE arrays SET a_int4 = '{3,NULL,4}' WHERE id = 101;

INSERT INTO others SELECT id + 100, c_mood, c_posint, c_money_text, c_price, c_pair, c_bit, c_bit1, c_varbit,
  c_int4range, c_tstzrange, c_numrange, c_point, c_box, c_tsvector, c_hstore, c_citext, c_ltree
  FROM others ORDER BY id;
UPDATE others SET c_mood = 'ok' WHERE id = 101;

-- Unchanged TOAST: only `small` changes, big/big_bytea/big_arr are not sent by pgoutput
-- (DEFAULT); with FULL the old tuple carries them.
UPDATE toast_default SET small = 's2' WHERE id = 1;
UPDATE toast_full SET small = 's2' WHERE id = 1;
DELETE FROM toast_default WHERE id = 1;
DELETE FROM toast_full WHERE id = 1;

UPDATE ri_full SET v = 'uno' WHERE id = 1;
DELETE FROM ri_full WHERE id = 2;
UPDATE ri_default SET v = 'uno' WHERE id = 1;
DELETE FROM ri_default WHERE id = 2;

-- Primary-key updates (Debezium: delete + tombstone + create).
UPDATE pk_change SET id = 2 WHERE id = 1;
UPDATE pk_change SET id = 3, v = 'b' WHERE id = 2;
UPDATE pk_composite SET b = 'y' WHERE a = 1;

INSERT INTO keyless VALUES (3, 'three');
UPDATE keyless SET b = 'uno' WHERE a = 1;
DELETE FROM keyless WHERE a = 2;
INSERT INTO keyless_nothing VALUES (2, 'two');

TRUNCATE trunc;
INSERT INTO trunc VALUES (3, 'c');

-- Columns added (one with a default, one nullable) and one dropped mid-stream.
INSERT INTO evolve VALUES (2, 'streamed before alter');
ALTER TABLE evolve ADD COLUMN b integer NOT NULL DEFAULT 7;
ALTER TABLE evolve ADD COLUMN c timestamptz;
INSERT INTO evolve VALUES (3, 'after alter', 8, '2020-04-01 11:51:02+00');
UPDATE evolve SET a = 'old row updated' WHERE id = 1;
ALTER TABLE evolve DROP COLUMN c;
INSERT INTO evolve VALUES (4, 'after drop', 9);

-- One transaction with many rows (and a row changed twice in it).
BEGIN;
INSERT INTO bulk SELECT i, 'row ' || i, i::bigint * 1000000007 FROM generate_series(1, 300) i;
UPDATE bulk SET v = 'changed in the same transaction' WHERE id = 150;
DELETE FROM bulk WHERE id = 300;
COMMIT;

-- NOT NULL columns of every type: an update, then deletes, under each replica identity.
UPDATE nn_default SET c_text = 'nn updated' WHERE id = 1;
UPDATE nn_full SET c_text = 'nn updated' WHERE id = 1;
UPDATE nn_index SET c_text = 'nn updated' WHERE id = 1;
DELETE FROM nn_default WHERE id = 1;
DELETE FROM nn_default WHERE id = 3;
DELETE FROM nn_full WHERE id = 1;
DELETE FROM nn_full WHERE id = 3;
DELETE FROM nn_index WHERE id = 1;
DELETE FROM nn_index WHERE id = 3;
