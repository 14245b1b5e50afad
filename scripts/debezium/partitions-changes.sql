-- The streamed changes of the partitioned table (after changes.sql): inserts into each
-- partition, an update within one, updates that move a row to another partition, at the
-- first level and within the sub-partitioned one (a delete there and an insert here, in
-- logical decoding), a delete.
\set ON_ERROR_STOP on
SET TimeZone = 'UTC';

INSERT INTO measurements VALUES
  (6, '2024-09-01', 'f', 6), (7, '2025-03-01', 'g', 2),
  (8, '2025-08-01', 'h', 80), (9, '1999-01-01', 'i', 9);
UPDATE measurements SET v = 'a2' WHERE id = 1;
UPDATE measurements SET n = 70, at = '2025-09-01' WHERE id = 3;
UPDATE measurements SET at = '2025-04-01' WHERE id = 2;
DELETE FROM measurements WHERE id = 5;
