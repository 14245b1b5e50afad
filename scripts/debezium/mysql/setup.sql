-- The tables and the rows present BEFORE the connector starts (Debezium's initial snapshot
-- reads them as op "r"), for MySQL 8.0 and MariaDB 10.11 alike. Run in a fresh database by
-- `scripts/debezium-capture --source mysql` (the mysql client) and by the debezium_mysql
-- integration test (one statement at a time: each ends a line with ";"). Deterministic:
-- fixed values only. Zero dates need a sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE /
-- strict mode; times are written in UTC.
SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';
SET SESSION time_zone = '+00:00';

-- Every integer type, signed and unsigned. Row 1: typical values; 2: all NULL;
-- 3: minimums; 4: maximums (BIGINT UNSIGNED up to 2^64-1).
CREATE TABLE ints (
  id INT NOT NULL PRIMARY KEY,
  c_tiny TINYINT, c_tiny_u TINYINT UNSIGNED, c_bool BOOLEAN,
  c_small SMALLINT, c_small_u SMALLINT UNSIGNED,
  c_medium MEDIUMINT, c_medium_u MEDIUMINT UNSIGNED,
  c_int INT, c_int_u INT UNSIGNED,
  c_big BIGINT, c_big_u BIGINT UNSIGNED
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO ints VALUES (1, 12, 200, 1, 1234, 60000, 123456, 16000000, 123456789, 4000000000, 1234567890123, 9223372036854775808);
INSERT INTO ints VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO ints VALUES (3, -128, 0, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0);
INSERT INTO ints VALUES (4, 127, 255, 127, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, 18446744073709551615);

-- Exact and approximate numbers.
CREATE TABLE numbers (
  id INT NOT NULL PRIMARY KEY,
  c_dec DECIMAL(10,2), c_dec0 DECIMAL(20,0), c_dec_wide DECIMAL(65,30), c_numeric NUMERIC(5,1),
  c_float FLOAT, c_double DOUBLE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO numbers VALUES (1, 12345.67, 12345678901234567890, 12345678901234567890.123456789012345678901234567890, 1234.5, 1.5, -2.25);
INSERT INTO numbers VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO numbers VALUES (3, -99999999.99, -99999999999999999999, -0.000000000000000000000000000001, -9999.9, -3.4e38, -1.7976931348623157e308);
INSERT INTO numbers VALUES (4, 0, 0, 0, 0, 0, 0);
INSERT INTO numbers VALUES (5, 0.01, 1, 99999999999999999999999999999999999.999999999999999999999999999999, 0.1, 1e-30, 2.2250738585072014e-308);

-- Dates and times with every fractional precision. Row 1: typical; 2: all NULL; 3: before
-- 1970 and the lowest values; 4: the highest; 5: zero dates (and YEAR 0).
CREATE TABLE temporal (
  id INT NOT NULL PRIMARY KEY,
  c_date DATE NULL,
  c_datetime DATETIME NULL, c_datetime3 DATETIME(3) NULL, c_datetime6 DATETIME(6) NULL,
  c_timestamp TIMESTAMP NULL, c_timestamp3 TIMESTAMP(3) NULL, c_timestamp6 TIMESTAMP(6) NULL,
  c_time TIME NULL, c_time3 TIME(3) NULL, c_time6 TIME(6) NULL,
  c_year YEAR NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO temporal VALUES (1, '2024-02-29', '2024-02-29 13:14:15', '2024-02-29 13:14:15.123', '2024-02-29 13:14:15.123456', '2024-02-29 13:14:15', '2024-02-29 13:14:15.123', '2024-02-29 13:14:15.123456', '13:14:15', '13:14:15.123', '13:14:15.123456', 2024);
INSERT INTO temporal VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO temporal VALUES (3, '1000-01-01', '1000-01-01 00:00:00', '1969-12-31 23:59:59.999', '1969-12-31 23:59:58.000001', '1970-01-01 00:00:01', '1970-01-01 00:00:01.001', '1970-01-01 00:00:01.000001', '-838:59:59', '-00:00:00.001', '-838:59:58.999999', 1901);
INSERT INTO temporal VALUES (4, '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07', '2038-01-19 03:14:07.999', '2038-01-19 03:14:07.999999', '838:59:59', '838:59:59.000', '838:59:59.000000', 2155);
INSERT INTO temporal VALUES (5, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000', '0000-00-00 00:00:00.000000', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000', '0000-00-00 00:00:00.000000', '00:00:00', '00:00:00.000', '00:00:00.000000', 0);

-- Character and binary strings.
CREATE TABLE strings (
  id INT NOT NULL PRIMARY KEY,
  c_char CHAR(5), c_varchar VARCHAR(50), c_tinytext TINYTEXT, c_text TEXT, c_mediumtext MEDIUMTEXT,
  c_longtext LONGTEXT, c_latin1 VARCHAR(20) CHARACTER SET latin1,
  c_binary BINARY(4), c_varbinary VARBINARY(10), c_tinyblob TINYBLOB, c_blob BLOB,
  c_mediumblob MEDIUMBLOB, c_longblob LONGBLOB
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO strings VALUES (1, 'ab', 'héllo ✓', 'tiny', 'a text', 'medium', 'long', 'café', X'00FF10', X'DEADBEEF', X'01', X'00FF10', X'0102', X'FF');
INSERT INTO strings VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO strings VALUES (3, '', '', '', '', '', '', '', X'', X'', X'', X'', X'', X'');
INSERT INTO strings VALUES (4, 'x y', 'quote '' and \\ backslash', 'tab\there', 'line\nbreak', '😀 emoji', '{"not":"json"}', 'ÿ', X'FFFFFFFF', X'00', X'00', X'00', X'00', X'00');

-- BIT, ENUM, SET, JSON and the spatial types.
CREATE TABLE others (
  id INT NOT NULL PRIMARY KEY,
  c_bit1 BIT(1), c_bit10 BIT(10), c_bit64 BIT(64),
  c_enum ENUM('small', 'medium', 'large'), c_set SET('a', 'b', 'c'),
  c_json JSON,
  c_geometry GEOMETRY, c_point POINT, c_linestring LINESTRING, c_polygon POLYGON,
  c_multipoint MULTIPOINT, c_collection GEOMETRYCOLLECTION
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO others VALUES (1, b'1', b'1000000011', b'1111111111111111111111111111111111111111111111111111111111111111', 'medium', 'a,c', '{"aa": "x", "b": [1, 2.5, null, true, false], "nested": {"k": "v"}, "n": -7, "big": 12345678901234567890, "s": "é\\"q"}', ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('POINT(3 4)'), ST_GeomFromText('LINESTRING(0 0, 1 1, 2 3)'), ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0))'), ST_GeomFromText('MULTIPOINT(1 1, 2 2)'), ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))'));
INSERT INTO others VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO others VALUES (3, b'0', b'0', b'0', 'small', '', '[]', ST_GeomFromText('POINT(-1.5 0.25)', 3857), ST_GeomFromText('POINT(0 0)'), ST_GeomFromText('LINESTRING(1 1, 2 2)'), ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))'), ST_GeomFromText('MULTIPOINT(0 0)'), ST_GeomFromText('GEOMETRYCOLLECTION(POINT(0 0))'));
INSERT INTO others VALUES (4, b'1', b'1111111111', b'1', 'large', 'a,b,c', '"a string"', NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO others VALUES (5, b'0', b'0000000001', b'10000000', 'small', 'b', '{}', NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO others VALUES (6, b'1', b'0100000000', b'0', 'medium', 'c', '3.25', NULL, NULL, NULL, NULL, NULL, NULL);

-- A composite primary key whose order (c_key, a_key) is not the columns' order.
CREATE TABLE pk_composite (
  a_key INT NOT NULL, b_val VARCHAR(20), c_key VARCHAR(10) NOT NULL, d_val INT,
  PRIMARY KEY (c_key, a_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO pk_composite VALUES (1, 'one', 'x', 10);
INSERT INTO pk_composite VALUES (2, 'two', 'y', 20);

-- No primary key (records with null keys).
CREATE TABLE keyless (a INT, b VARCHAR(20)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO keyless VALUES (1, 'one');
INSERT INTO keyless VALUES (2, 'two');

-- A primary key changed by an update.
CREATE TABLE pk_change (id INT NOT NULL PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO pk_change VALUES (1, 'one');
INSERT INTO pk_change VALUES (2, 'two');

-- A column added while streaming (changes.sql).
CREATE TABLE evolve (id INT NOT NULL PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO evolve VALUES (1, 'before');

-- Every type as a NOT NULL non-key column, in a table whose rows are deleted (changes.sql):
-- Connect's required fields (the Avro schemas' non-optional ones) and the delete's before image.
-- Rows 1 and 3: the other tables' rows 1 and 3 (typical values, minimums).
CREATE TABLE not_null (
  id INT NOT NULL PRIMARY KEY,
  c_tiny TINYINT NOT NULL, c_tiny_u TINYINT UNSIGNED NOT NULL, c_bool BOOLEAN NOT NULL,
  c_small SMALLINT NOT NULL, c_small_u SMALLINT UNSIGNED NOT NULL,
  c_medium MEDIUMINT NOT NULL, c_medium_u MEDIUMINT UNSIGNED NOT NULL,
  c_int INT NOT NULL, c_int_u INT UNSIGNED NOT NULL,
  c_big BIGINT NOT NULL, c_big_u BIGINT UNSIGNED NOT NULL,
  c_dec DECIMAL(10,2) NOT NULL, c_dec0 DECIMAL(20,0) NOT NULL, c_dec_wide DECIMAL(65,30) NOT NULL,
  c_numeric NUMERIC(5,1) NOT NULL, c_float FLOAT NOT NULL, c_double DOUBLE NOT NULL,
  c_date DATE NOT NULL,
  c_datetime DATETIME NOT NULL, c_datetime3 DATETIME(3) NOT NULL, c_datetime6 DATETIME(6) NOT NULL,
  c_timestamp TIMESTAMP NOT NULL, c_timestamp3 TIMESTAMP(3) NOT NULL,
  c_timestamp6 TIMESTAMP(6) NOT NULL,
  c_time TIME NOT NULL, c_time3 TIME(3) NOT NULL, c_time6 TIME(6) NOT NULL, c_year YEAR NOT NULL,
  c_char CHAR(5) NOT NULL, c_varchar VARCHAR(50) NOT NULL, c_tinytext TINYTEXT NOT NULL,
  c_text TEXT NOT NULL, c_mediumtext MEDIUMTEXT NOT NULL, c_longtext LONGTEXT NOT NULL,
  c_latin1 VARCHAR(20) CHARACTER SET latin1 NOT NULL,
  c_binary BINARY(4) NOT NULL, c_varbinary VARBINARY(10) NOT NULL, c_tinyblob TINYBLOB NOT NULL,
  c_blob BLOB NOT NULL, c_mediumblob MEDIUMBLOB NOT NULL, c_longblob LONGBLOB NOT NULL,
  c_bit1 BIT(1) NOT NULL, c_bit10 BIT(10) NOT NULL, c_bit64 BIT(64) NOT NULL,
  c_enum ENUM('small', 'medium', 'large') NOT NULL, c_set SET('a', 'b', 'c') NOT NULL,
  c_json JSON NOT NULL,
  c_geometry GEOMETRY NOT NULL, c_point POINT NOT NULL, c_linestring LINESTRING NOT NULL,
  c_polygon POLYGON NOT NULL, c_multipoint MULTIPOINT NOT NULL,
  c_collection GEOMETRYCOLLECTION NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO not_null SELECT i.id, i.c_tiny, i.c_tiny_u, i.c_bool, i.c_small, i.c_small_u,
  i.c_medium, i.c_medium_u, i.c_int, i.c_int_u, i.c_big, i.c_big_u,
  n.c_dec, n.c_dec0, n.c_dec_wide, n.c_numeric, n.c_float, n.c_double,
  t.c_date, t.c_datetime, t.c_datetime3, t.c_datetime6, t.c_timestamp, t.c_timestamp3,
  t.c_timestamp6, t.c_time, t.c_time3, t.c_time6, t.c_year,
  s.c_char, s.c_varchar, s.c_tinytext, s.c_text, s.c_mediumtext, s.c_longtext, s.c_latin1,
  s.c_binary, s.c_varbinary, s.c_tinyblob, s.c_blob, s.c_mediumblob, s.c_longblob,
  o.c_bit1, o.c_bit10, o.c_bit64, o.c_enum, o.c_set, o.c_json,
  o.c_geometry, o.c_point, o.c_linestring, o.c_polygon, o.c_multipoint, o.c_collection
  FROM ints i JOIN numbers n ON n.id = i.id JOIN temporal t ON t.id = i.id
  JOIN strings s ON s.id = i.id JOIN others o ON o.id = i.id WHERE i.id IN (1, 3) ORDER BY i.id;

-- The capture's end markers (not written out).
CREATE TABLE zz_marker (id INT NOT NULL PRIMARY KEY, phase VARCHAR(10)) ENGINE=InnoDB;
