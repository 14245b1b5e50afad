-- The partitioned table of the capture's "partitions-root" and "partitions-leaves"
-- combinations, run after setup.sql: a range-partitioned table with a default partition and a
-- sub-partitioned partition (two levels), rows in each before the snapshot.
\set ON_ERROR_STOP on
SET TimeZone = 'UTC';

CREATE TABLE measurements (id integer, at date, v text, n integer, PRIMARY KEY (id, at))
  PARTITION BY RANGE (at);
CREATE TABLE measurements_2024 PARTITION OF measurements
  FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE measurements_2025 PARTITION OF measurements
  FOR VALUES FROM ('2025-01-01') TO ('2026-01-01') PARTITION BY RANGE (at);
CREATE TABLE measurements_2025_h1 PARTITION OF measurements_2025
  FOR VALUES FROM ('2025-01-01') TO ('2025-07-01');
CREATE TABLE measurements_2025_h2 PARTITION OF measurements_2025
  FOR VALUES FROM ('2025-07-01') TO ('2026-01-01');
CREATE TABLE measurements_other PARTITION OF measurements DEFAULT;
INSERT INTO measurements VALUES
  (1, '2024-03-01', 'a', 1), (2, '2024-07-01', 'b', 2),
  (3, '2025-02-01', 'c', 3), (4, '2025-05-01', 'd', 40),
  (5, '2030-01-01', 'e', 5);
