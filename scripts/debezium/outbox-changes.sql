-- The outbox events (after changes.sql): two aggregate types, so two routed topics; a NULL
-- payload (a tombstone); the usual insert-then-delete in one transaction (the delete emits
-- nothing); an update (emits nothing either).
\set ON_ERROR_STOP on
INSERT INTO outbox VALUES
  ('00000000-0000-0000-0000-000000000001', 'order', 'o-1', 'OrderCreated',
   '{"id": "o-1", "total": 12.5, "lines": [{"sku": "a", "qty": 2}]}');
INSERT INTO outbox VALUES
  ('00000000-0000-0000-0000-000000000002', 'customer', 'c-7', 'CustomerRenamed',
   '{"id": "c-7", "name": "Zoë"}');
BEGIN;
INSERT INTO outbox VALUES
  ('00000000-0000-0000-0000-000000000003', 'order', 'o-1', 'OrderPaid', '{"paid": true}');
DELETE FROM outbox WHERE id = '00000000-0000-0000-0000-000000000003';
COMMIT;
INSERT INTO outbox VALUES
  ('00000000-0000-0000-0000-000000000004', 'order', 'o-2', 'OrderDeleted', NULL);
UPDATE outbox SET type = 'OrderCreatedAgain' WHERE id = '00000000-0000-0000-0000-000000000001';
