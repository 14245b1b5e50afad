-- The outbox table of the capture's "outbox" combination (Avro), run after setup.sql, in the
-- layout of Debezium's outbox event router (io.debezium.transforms.outbox.EventRouter, its
-- default column names): empty at the snapshot; outbox-changes.sql inserts the events.
\set ON_ERROR_STOP on
CREATE TABLE outbox (
  id uuid PRIMARY KEY,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb
);
