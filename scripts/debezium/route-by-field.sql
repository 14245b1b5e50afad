-- The table of the capture's "unwrap-route-headers" combination, run after setup.sql: its
-- `dest` column names the topic ExtractNewRecordState's route.by.field sends each change to
-- (null and blank: not routed). The topics are under the run's own prefix, so that they are
-- read with the rest: the capture's (dbzcap, in its database dbz_capture), or the parity
-- test's (its database's name). REPLICA IDENTITY FULL: a delete's before image holds dest,
-- which routes it.
\set ON_ERROR_STOP on
CREATE FUNCTION routed_topic(suffix text) RETURNS text LANGUAGE sql AS
  $$SELECT CASE current_database() WHEN 'dbz_capture' THEN 'dbzcap' ELSE current_database() END
           || '.' || suffix$$;
CREATE TABLE routed (id integer PRIMARY KEY, dest text, n integer);
ALTER TABLE routed REPLICA IDENTITY FULL;
INSERT INTO routed VALUES
  (1, routed_topic('routed_a'), 1), (2, routed_topic('routed_b'), 2), (3, NULL, 3);
