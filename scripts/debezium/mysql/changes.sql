-- The streamed changes, run after the initial snapshot has finished (see setup.sql for who
-- runs it). Deterministic: fixed values only.
SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';
SET SESSION time_zone = '+00:00';

-- Every snapshotted value again as a streamed insert (ids + 100; one statement, so one rows
-- event with several rows: source.row counts them), then updates and deletes.
INSERT INTO ints SELECT id + 100, c_tiny, c_tiny_u, c_bool, c_small, c_small_u, c_medium, c_medium_u, c_int, c_int_u, c_big, c_big_u FROM ints ORDER BY id;
UPDATE ints SET c_int = 4321, c_big_u = 18446744073709551614 WHERE id = 101;
UPDATE ints SET c_int = NULL WHERE id = 104;
DELETE FROM ints WHERE id = 102;

INSERT INTO numbers SELECT id + 100, c_dec, c_dec0, c_dec_wide, c_numeric, c_float, c_double FROM numbers ORDER BY id;
UPDATE numbers SET c_dec = -0.5 WHERE id = 101;

INSERT INTO temporal SELECT id + 100, c_date, c_datetime, c_datetime3, c_datetime6, c_timestamp, c_timestamp3, c_timestamp6, c_time, c_time3, c_time6, c_year FROM temporal ORDER BY id;
UPDATE temporal SET c_time6 = '-00:00:01.5', c_year = 1999 WHERE id = 101;

INSERT INTO strings SELECT id + 100, c_char, c_varchar, c_tinytext, c_text, c_mediumtext, c_longtext, c_latin1, c_binary, c_varbinary, c_tinyblob, c_blob, c_mediumblob, c_longblob FROM strings ORDER BY id;
DELETE FROM strings WHERE id = 103;

INSERT INTO others SELECT id + 100, c_bit1, c_bit10, c_bit64, c_enum, c_set, c_json, c_geometry, c_point, c_linestring, c_polygon, c_multipoint, c_collection FROM others ORDER BY id;
UPDATE others SET c_enum = 'large', c_set = 'b,c', c_bit1 = b'0', c_json = '{"updated": [true]}' WHERE id = 101;

-- Several tables in one transaction.
START TRANSACTION;
INSERT INTO pk_composite VALUES (3, 'three', 'z', 30);
UPDATE pk_composite SET d_val = 11 WHERE a_key = 1;
UPDATE pk_composite SET c_key = 'w' WHERE a_key = 2;
DELETE FROM pk_composite WHERE a_key = 1;
INSERT INTO keyless VALUES (3, 'three');
COMMIT;
UPDATE keyless SET b = 'TWO' WHERE a = 2;
DELETE FROM keyless WHERE a = 1;

-- A key change: Debezium writes a delete (+ tombstone) and a create.
UPDATE pk_change SET id = 10 WHERE id = 1;
UPDATE pk_change SET v = 'changed' WHERE id = 2;

-- A column added mid-stream: later events carry it.
INSERT INTO evolve VALUES (2, 'before alter');
ALTER TABLE evolve ADD COLUMN extra VARCHAR(10) DEFAULT 'new';
INSERT INTO evolve VALUES (3, 'after alter', 'given');
INSERT INTO evolve (id, v) VALUES (4, 'defaulted');
UPDATE evolve SET v = 'updated' WHERE id = 1;
DELETE FROM evolve WHERE id = 2;

-- NOT NULL columns of every type: an update, then deletes.
UPDATE not_null SET c_varchar = 'nn updated' WHERE id = 1;
DELETE FROM not_null WHERE id = 1;
DELETE FROM not_null WHERE id = 3;
