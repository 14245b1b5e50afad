-- The schema and the rows present BEFORE the connector starts (Debezium's initial snapshot
-- reads them as op "r"). Run by scripts/debezium-capture on a fresh database. Deterministic:
-- fixed values only, no now()/random().
\set ON_ERROR_STOP on
SET TimeZone = 'UTC';

CREATE EXTENSION IF NOT EXISTS hstore;
CREATE EXTENSION IF NOT EXISTS citext;
CREATE EXTENSION IF NOT EXISTS ltree;

CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN money_text AS text;
CREATE DOMAIN price AS numeric(8,2);
CREATE TYPE pair AS (a integer, b text);

-- Every scalar type of docs/type-mapping.md. Row 1: typical values; 2: all NULL;
-- 3: minimums/negative extremes; 4: maximums; 5: NaN / infinities / special forms.
CREATE TABLE scalars (
  id integer PRIMARY KEY,
  c_bool boolean,
  c_int2 smallint,
  c_int4 integer,
  c_int8 bigint,
  c_oid oid,
  c_float4 real,
  c_float8 double precision,
  c_numeric numeric,
  c_numeric_10_4 numeric(10,4),
  c_numeric_38_0 numeric(38,0),
  c_text text,
  c_varchar varchar(20),
  c_bpchar char(5),
  c_char "char",
  c_name name,
  c_xml xml,
  c_money money,
  c_inet inet,
  c_cidr cidr,
  c_macaddr macaddr,
  c_macaddr8 macaddr8,
  c_uuid uuid,
  c_bytea bytea,
  c_json json,
  c_jsonb jsonb,
  c_date date,
  c_time time,
  c_time0 time(0),
  c_time3 time(3),
  c_time6 time(6),
  c_timetz timetz,
  c_timestamp timestamp,
  c_timestamp0 timestamp(0),
  c_timestamp3 timestamp(3),
  c_timestamptz timestamptz,
  c_timestamptz0 timestamptz(0),
  c_timestamptz3 timestamptz(3),
  c_interval interval
);

INSERT INTO scalars VALUES
(1, true, 12, 1234, 123456789012, 4242, 1.5e-05, 3.141592653589793, 123.4500, 123.4500, 12345678901234567890,
 'héllo "x"', 'abc', 'ab', 'q', 'a_name', '<a b="1">t</a>', -1234.56, '192.168.0.1/24', '10.0.0.0/8',
 '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x0a0b0c',
 '{"a": [1, 2], "b": null}', '{"b": {"c": "d"}, "a": 1}', '2016-11-04', '13:51:30.123456', '13:51:30', '13:51:30.123',
 '13:51:30.123456', '13:51:30.123789+02', '2016-11-04 13:51:30.123456', '2016-11-04 13:51:30',
 '2016-11-04 13:51:30.123', '2016-11-04 13:51:30.123456+02', '2020-04-01 11:51:02+00', '2020-04-01 11:51:02.1+00',
 'P1Y2M3DT4H5M6.78S'),
(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(3, false, -32768, -2147483648, -9223372036854775808, 0, -3.4028235e38, -1.7976931348623157e308,
 -99999999999999999999.999999999999, -999999.9999, -99999999999999999999999999999999999999,
 '', '', '', '', '', '<x/>', -92233720368547758.08, '::', '::/0', '00:00:00:00:00:00', '00:00:00:00:00:00:00:00',
 '00000000-0000-0000-0000-000000000000', '\x', '[]', '{}', '0001-01-01 BC', '00:00:00', '00:00:00', '00:00:00',
 '00:00:00', '00:00:00+1459', '0001-01-01 00:00:00 BC', '0001-01-01 00:00:00', '0001-01-01 00:00:00',
 '0001-01-01 00:00:00+00 BC', '1970-01-01 00:00:00+00', '1969-12-31 23:59:59.999+00', 'P-1Y-2M-3DT-4H-5M-6.78S'),
(4, true, 32767, 2147483647, 9223372036854775807, 4294967295, 3.4028235e38, 1.7976931348623157e308,
 99999999999999999999.999999999999, 999999.9999, 99999999999999999999999999999999999999,
 repeat('z', 300), repeat('y', 20), 'abcde', '~', repeat('n', 63), ('<r>' || repeat('x', 100) || '</r>')::xml,
 92233720368547758.07, 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '255.255.255.255/32', 'ff:ff:ff:ff:ff:ff',
 'ff:ff:ff:ff:ff:ff:ff:ff', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\xff00ff', '{"n": 1e300, "s": "\u00e9\n"}',
 '{"deep": [[[[1]]]], "big": 12345678901234567890}', '9999-12-31', '23:59:59.999999', '24:00:00', '23:59:59.999',
 '24:00:00', '24:00:00+00', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999',
 '9999-12-31 23:59:59.999999+00', '9999-12-31 23:59:59+00', '9999-12-31 23:59:59.999+00', '178000000 years'),
(5, true, 0, 0, 0, 1, 'NaN', '-Infinity', 'NaN', 'NaN', 0, E'tab\there\nnewline \\ backslash', 'ünïcödé 😀', 'a  ',
 ' ', 'x y', '<?xml version="1.0"?><doc/>', 0, '2001:db8::1', '2001:db8::/32', '08-00-2b-01-02-03',
 '0800.2b01.0203.0405', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '\x00', 'null', '"a string"', 'infinity',
 '12:00:00.5', '12:00:00.5', '12:00:00.5', '12:00:00.5', '11:51:02-0830', 'infinity', '-infinity',
 'infinity', 'infinity', '-infinity', 'infinity', 'PT0S');

-- The special values the other rows cannot hold together (separate columns so one row shows each).
CREATE TABLE specials (
  id integer PRIMARY KEY,
  c_float4 real,
  c_float8 double precision,
  c_numeric numeric,
  c_numeric_10_2 numeric(10,2),
  c_date date,
  c_timestamp timestamp,
  c_timestamptz timestamptz,
  c_interval interval
);
INSERT INTO specials VALUES
(1, 'Infinity', 'NaN', 'Infinity', '-99999999.99', '-infinity', '-infinity', '-infinity', '-1 day 2 hours'),
(2, '-Infinity', 'Infinity', '-Infinity', '99999999.99', '5874897-12-31', '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999+00', '1 mon'),
(3, -0.0, -0.0, '0.000', '-0.01', '4713-01-01 BC', '4713-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC', '-178000000 years'),
(4, 1e-45, 5e-324, '1e-30', '0.00', '2000-02-29', '2000-02-29 12:00:00.000001', '2000-02-29 12:00:00.000001+00', '0.000001 seconds');

-- Arrays of the mapped element types, with NULL elements and multi-dimensional forms.
CREATE TABLE arrays (
  id integer PRIMARY KEY,
  a_bool boolean[],
  a_int2 smallint[],
  a_int4 integer[],
  a_int8 bigint[],
  a_oid oid[],
  a_float4 real[],
  a_float8 double precision[],
  a_numeric numeric[],
  a_numeric_5_2 numeric(5,2)[],
  a_text text[],
  a_varchar varchar(10)[],
  a_bpchar char(3)[],
  a_char "char"[],
  a_uuid uuid[],
  a_inet inet[],
  a_cidr cidr[],
  a_macaddr macaddr[],
  a_macaddr8 macaddr8[],
  a_json json[],
  a_jsonb jsonb[],
  a_bytea bytea[],
  a_date date[],
  a_time time[],
  a_timetz timetz[],
  a_timestamp timestamp[],
  a_timestamptz timestamptz[],
  a_interval interval[],
  a_money money[],
  a_name name[],
  a_xml xml[],
  a_mood mood[],
  a_int4_2d integer[][],
  a_int4_lb integer[]
);
INSERT INTO arrays VALUES
(1, '{t,f,NULL}', '{1,-32768,NULL}', '{1,2,NULL}', '{9223372036854775807,NULL}', '{1,NULL}', '{1.5,NaN,NULL}',
 '{1.5,-Infinity,NULL}', '{1.50,NaN,NULL}', '{1.5,NULL}', '{"a b","c\"d",NULL,"NULL",""}', '{x,NULL}', '{ab,NULL}',
 '{a,NULL}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}', '{192.168.0.1/24,NULL}', '{10.0.0.0/8,NULL}',
 '{08:00:2b:01:02:03,NULL}', '{08:00:2b:01:02:03:04:05,NULL}', ARRAY['{"a":1}'::json, NULL],
 ARRAY['{"a":1}'::jsonb, NULL], ARRAY['\x0a0b'::bytea, NULL], '{2016-11-04,infinity,NULL}', '{13:51:30.5,NULL}',
 '{13:51:30+02,NULL}', '{"2016-11-04 13:51:30.123456",NULL}', '{"2020-04-01 11:51:02+00",NULL}',
 '{P1D,NULL}', '{1.00,2.00,NULL}', '{a,NULL}', ARRAY['<a/>'::xml, NULL], '{happy,NULL}', '{{1,2},{3,NULL}}',
 '[0:1]={7,8}'),
(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(3, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
 '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}');

-- Enums, domains, composite and other types Debezium maps specially or not at all.
CREATE TABLE others (
  id integer PRIMARY KEY,
  c_mood mood,
  c_posint posint,
  c_money_text money_text,
  c_price price,
  c_pair pair,
  c_bit bit(3),
  c_bit1 bit(1),
  c_varbit varbit(10),
  c_int4range int4range,
  c_tstzrange tstzrange,
  c_numrange numrange,
  c_point point,
  c_box box,
  c_tsvector tsvector,
  c_hstore hstore,
  c_citext citext,
  c_ltree ltree
);
INSERT INTO others VALUES
(1, 'happy', 7, 'dom text', 12.34, ROW(1, 'one'), B'101', B'1', B'1100', '[1,5)', '[2020-01-01 00:00:00+00,2020-02-01 00:00:00+00)',
 '(1.5,2.5]', '(1.5,2.5)', '((0,0),(1,1))', 'a fat cat', 'a=>1, b=>NULL', 'CaSe', 'top.mid.leaf'),
(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
(3, 'sad', 2147483647, '', -999999.99, ROW(NULL, NULL), B'000', B'0', B'', 'empty', '(,)', '[,1)', '(-0,1e300)',
 '((-1,-1),(1,1))', '', '', '', '');

-- Unchanged TOASTed values: REPLICA IDENTITY DEFAULT and FULL. The big columns (150 md5s:
-- ~4.8 kB of text, 2.4 kB of bytea, a 150-element array) have STORAGE EXTERNAL (no
-- compression), so each is stored out of line.
CREATE TABLE toast_default (id integer PRIMARY KEY, small text, big text, big_bytea bytea, big_arr text[]);
ALTER TABLE toast_default ALTER COLUMN big SET STORAGE EXTERNAL,
  ALTER COLUMN big_bytea SET STORAGE EXTERNAL, ALTER COLUMN big_arr SET STORAGE EXTERNAL;
CREATE TABLE toast_full (LIKE toast_default INCLUDING ALL);
ALTER TABLE toast_full REPLICA IDENTITY FULL;
INSERT INTO toast_default
  SELECT 1, 's1', string_agg(md5(i::text), '' ORDER BY i), decode(string_agg(md5(i::text), '' ORDER BY i), 'hex'),
         array_agg(md5(i::text) ORDER BY i) FROM generate_series(1, 150) i;
INSERT INTO toast_full SELECT * FROM toast_default;

-- REPLICA IDENTITY FULL with a key (before images on update/delete).
CREATE TABLE ri_full (id integer PRIMARY KEY, v text, n integer);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
INSERT INTO ri_full VALUES (1, 'one', 1), (2, 'two', 2);

-- REPLICA IDENTITY DEFAULT with a key (key-only before images on delete).
CREATE TABLE ri_default (id integer PRIMARY KEY, v text, n integer);
INSERT INTO ri_default VALUES (1, 'one', 1), (2, 'two', 2);

-- Primary-key updates, a composite key.
CREATE TABLE pk_change (id integer PRIMARY KEY, v text);
INSERT INTO pk_change VALUES (1, 'a');
CREATE TABLE pk_composite (a integer, b text, v text, PRIMARY KEY (a, b));
INSERT INTO pk_composite VALUES (1, 'x', 'first');

-- A keyless table (REPLICA IDENTITY FULL so updates and deletes are allowed) and an
-- insert-only keyless table with the default identity.
CREATE TABLE keyless (a integer, b text);
ALTER TABLE keyless REPLICA IDENTITY FULL;
INSERT INTO keyless VALUES (1, 'one'), (1, 'one'), (2, NULL);
CREATE TABLE keyless_nothing (a integer, b text);
INSERT INTO keyless_nothing VALUES (1, 'one');

-- TRUNCATE (Debezium's default skipped.operations=t leaves it out).
CREATE TABLE trunc (id integer PRIMARY KEY, v text);
INSERT INTO trunc VALUES (1, 'a'), (2, 'b');

-- A column added (and one dropped) mid-stream.
CREATE TABLE evolve (id integer PRIMARY KEY, a text);
INSERT INTO evolve VALUES (1, 'before');

-- A transaction with many rows.
CREATE TABLE bulk (id integer PRIMARY KEY, v text, n bigint);

-- Every type as a NOT NULL non-key column, in tables whose rows are deleted (changes.sql) under
-- each replica identity: DEFAULT (the old tuple holds the key only: Debezium fills the before
-- image's other NOT NULL columns with their type's default, Connect's required fields being
-- unable to hold null), FULL (the whole old row) and USING INDEX (the old tuple holds the
-- unique index's column only, c_uuid; the key column is not in it). Rows 1 and 3: scalars' and
-- others' rows 1 and 3 (typical values, minimums) and a few arrays.
CREATE TABLE nn_default (
  id integer PRIMARY KEY,
  c_bool boolean NOT NULL, c_int2 smallint NOT NULL, c_int4 integer NOT NULL,
  c_int8 bigint NOT NULL, c_oid oid NOT NULL, c_float4 real NOT NULL,
  c_float8 double precision NOT NULL, c_numeric numeric NOT NULL,
  c_numeric_10_4 numeric(10,4) NOT NULL, c_numeric_38_0 numeric(38,0) NOT NULL,
  c_text text NOT NULL, c_varchar varchar(20) NOT NULL, c_bpchar char(5) NOT NULL,
  c_char "char" NOT NULL, c_name name NOT NULL, c_xml xml NOT NULL, c_money money NOT NULL,
  c_inet inet NOT NULL, c_cidr cidr NOT NULL, c_macaddr macaddr NOT NULL,
  c_macaddr8 macaddr8 NOT NULL, c_uuid uuid NOT NULL, c_bytea bytea NOT NULL, c_json json NOT NULL,
  c_jsonb jsonb NOT NULL, c_date date NOT NULL, c_time time NOT NULL, c_time0 time(0) NOT NULL,
  c_time3 time(3) NOT NULL, c_time6 time(6) NOT NULL, c_timetz timetz NOT NULL,
  c_timestamp timestamp NOT NULL, c_timestamp0 timestamp(0) NOT NULL,
  c_timestamp3 timestamp(3) NOT NULL, c_timestamptz timestamptz NOT NULL,
  c_timestamptz0 timestamptz(0) NOT NULL, c_timestamptz3 timestamptz(3) NOT NULL,
  c_interval interval NOT NULL, c_mood mood NOT NULL, c_posint posint NOT NULL,
  c_money_text money_text NOT NULL, c_price price NOT NULL, c_pair pair NOT NULL,
  c_bit bit(3) NOT NULL, c_bit1 bit(1) NOT NULL, c_varbit varbit(10) NOT NULL,
  c_int4range int4range NOT NULL, c_tstzrange tstzrange NOT NULL, c_numrange numrange NOT NULL,
  c_point point NOT NULL, c_box box NOT NULL, c_tsvector tsvector NOT NULL,
  c_hstore hstore NOT NULL, c_citext citext NOT NULL, c_ltree ltree NOT NULL,
  a_int4 integer[] NOT NULL, a_text text[] NOT NULL, a_numeric numeric[] NOT NULL,
  a_mood mood[] NOT NULL
);
INSERT INTO nn_default SELECT s.id, s.c_bool, s.c_int2, s.c_int4, s.c_int8, s.c_oid, s.c_float4,
  s.c_float8, s.c_numeric, s.c_numeric_10_4, s.c_numeric_38_0, s.c_text, s.c_varchar, s.c_bpchar,
  s.c_char, s.c_name, s.c_xml, s.c_money, s.c_inet, s.c_cidr, s.c_macaddr, s.c_macaddr8, s.c_uuid,
  s.c_bytea, s.c_json, s.c_jsonb, s.c_date, s.c_time, s.c_time0, s.c_time3, s.c_time6, s.c_timetz,
  s.c_timestamp, s.c_timestamp0, s.c_timestamp3, s.c_timestamptz, s.c_timestamptz0, s.c_timestamptz3,
  s.c_interval, o.c_mood, o.c_posint, o.c_money_text, o.c_price, o.c_pair, o.c_bit, o.c_bit1,
  o.c_varbit, o.c_int4range, o.c_tstzrange, o.c_numrange, o.c_point, o.c_box, o.c_tsvector,
  o.c_hstore, o.c_citext, o.c_ltree,
  '{1,2}', '{"a b",""}', '{1.50,0}', '{happy,sad}'
  FROM scalars s JOIN others o ON o.id = s.id WHERE s.id IN (1, 3) ORDER BY s.id;
CREATE TABLE nn_full (LIKE nn_default INCLUDING ALL);
ALTER TABLE nn_full REPLICA IDENTITY FULL;
INSERT INTO nn_full SELECT * FROM nn_default;
CREATE TABLE nn_index (LIKE nn_default INCLUDING ALL);
CREATE UNIQUE INDEX nn_index_uuid ON nn_index (c_uuid);
ALTER TABLE nn_index REPLICA IDENTITY USING INDEX nn_index_uuid;
INSERT INTO nn_index SELECT * FROM nn_default;

-- scripts/debezium-capture waits for this table's row to know every change before it is out.
CREATE TABLE zz_marker (id integer PRIMARY KEY, phase text);
