-- The streamed changes of the routed table (after changes.sql): inserts routed and not (a
-- blank dest), an update within a topic and one that changes it, deletes routed by their
-- before image (one with a null dest).
\set ON_ERROR_STOP on
INSERT INTO routed VALUES (4, routed_topic('routed_a'), 4), (5, '', 5);
UPDATE routed SET n = 10 WHERE id = 1;
UPDATE routed SET dest = routed_topic('routed_b') WHERE id = 1;
DELETE FROM routed WHERE id = 2;
DELETE FROM routed WHERE id = 3;
