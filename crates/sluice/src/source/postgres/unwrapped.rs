//! Row changes written as `ExtractNewRecordState` and `RegexRouter`s would leave them
//! ([`Direct`]): the row itself, not an envelope the chain reads and writes again. Every
//! record equals the chain's output on the envelope [`encode_change`] writes, byte for byte
//! (the tests below compare them on every kind of change and every delete mode).
//!
//! [`encode_change`]: super::encode::encode_change

use std::cell::Cell;
use std::sync::Arc;

use super::avro::layout::SOURCE_FIELDS;
use super::change::{ChangeKind, EncodeOptions, RowChange};
use super::encode::{position_headers, write_key, write_row, write_sequence};
use super::pgoutput::TupleData;
use super::relation::SourceIdentity;
use crate::event::{EventFormat, EventOptions, Op, SnapshotMarker, TransactionOrder};
use crate::event::{write_int, write_json_str};
use crate::record::OutRecord;
use crate::transform::{DeleteMode, Direct, EventField};

/// Whether the encoder can apply `direct` to events of `events`' formats: JSON without
/// schemas, and every added field one of the event's own members (the `source` block's are
/// [`SOURCE_FIELDS`], all of which [`encode_unwrapped`] writes).
pub fn supports(direct: &Direct, events: &EventOptions) -> bool {
    events.key_format() == EventFormat::Json
        && events.value_format() == EventFormat::Json
        && direct.fields().all(|(_, at)| match at {
            EventField::Envelope(_) => true,
            EventField::Source(field) => SOURCE_FIELDS.contains(&field),
            EventField::Transaction(field) => {
                matches!(field, "id" | "total_order" | "data_collection_order")
            }
            EventField::Other => false,
        })
}

/// Whether [`encode_unwrapped`] writes `change` (the outbox table's rows take the chain).
pub fn applies(change: &RowChange) -> bool {
    change.relation.outbox.is_none()
}

/// One event of a change: its row (`after`, or `before` for a delete), what it is, its
/// `transaction` block.
struct Event<'a> {
    row: &'a TupleData,
    old: Option<&'a TupleData>,
    op: Op,
    transaction: Option<TransactionOrder>,
}

/// Appends the records `direct` leaves of `change`'s events, in order; those it drops are
/// left out (each still takes its place in the transaction's record index).
pub fn encode_unwrapped(
    change: &RowChange,
    options: &EncodeOptions,
    identity: &SourceIdentity,
    direct: &Direct,
    out: &mut Vec<OutRecord>,
) {
    let rel = &change.relation;
    let topic = direct.route(&rel.topic);
    // Each event's place in the transaction, also of those the chain drops.
    let index = Cell::new(change.tx_index);
    let next = || index.set(index.get() + 1);
    let mut push = |out: &mut Vec<OutRecord>, key: Option<Vec<u8>>, value: Option<Vec<u8>>| {
        out.push(OutRecord {
            partition: None,
            topic: Arc::clone(&topic),
            key,
            value,
            headers: position_headers(change.commit_lsn, change.lsn, index.get()),
        });
    };
    let writer = Writer {
        change,
        options,
        identity,
        direct,
    };
    let events = &options.events;
    match &change.kind {
        ChangeKind::Insert { new } => {
            let value = writer.row(&Event {
                row: new,
                old: None,
                op: Op::Create,
                transaction: change.transaction,
            });
            push(out, write_key(rel, new, events, true), Some(value));
        }
        ChangeKind::Update {
            old,
            old_is_key_only,
            new,
            key_changed,
        } => {
            if *key_changed {
                let old = old.as_ref().expect("a key change comes with the old key");
                let old_key = write_key(rel, old, events, true);
                writer.delete(old, change.transaction, &old_key, &mut push, out);
                next();
                if options.tombstones {
                    writer.tombstone(&old_key, &mut push, out);
                    next();
                }
                let value = writer.row(&Event {
                    row: new,
                    old: None,
                    op: Op::Create,
                    transaction: change.transaction.map(TransactionOrder::next),
                });
                push(out, write_key(rel, new, events, true), Some(value));
            } else {
                let value = writer.row(&Event {
                    row: new,
                    old: old.as_ref().filter(|_| !old_is_key_only),
                    op: Op::Update,
                    transaction: change.transaction,
                });
                push(out, write_key(rel, new, events, true), Some(value));
            }
        }
        ChangeKind::Delete { old, .. } => {
            let key = write_key(rel, old, events, true);
            writer.delete(old, change.transaction, &key, &mut push, out);
            next();
            if options.tombstones {
                writer.tombstone(&key, &mut push, out);
            }
        }
        // ExtractNewRecordState drops truncates.
        ChangeKind::Truncate => {}
        ChangeKind::Read { row, .. } => {
            let value = writer.row(&Event {
                row,
                old: None,
                op: Op::Read,
                transaction: None,
            });
            push(out, write_key(rel, row, events, false), Some(value));
        }
    }
}

/// Writes one change's unwrapped values.
struct Writer<'a> {
    change: &'a RowChange,
    options: &'a EncodeOptions,
    identity: &'a SourceIdentity,
    direct: &'a Direct,
}

type Push<'p> = dyn FnMut(&mut Vec<OutRecord>, Option<Vec<u8>>, Option<Vec<u8>>) + 'p;

impl Writer<'_> {
    /// A delete event as the delete mode has it.
    fn delete(
        &self,
        old: &TupleData,
        transaction: Option<TransactionOrder>,
        key: &Option<Vec<u8>>,
        push: &mut Push<'_>,
        out: &mut Vec<OutRecord>,
    ) {
        match self.direct.mode() {
            DeleteMode::Drop => {}
            // A null value with the row's schema: JSON's `null` without schemas.
            DeleteMode::Tombstone => push(out, key.clone(), Some(b"null".to_vec())),
            DeleteMode::DeleteToTombstone => push(out, key.clone(), None),
            DeleteMode::Rewrite | DeleteMode::RewriteWithTombstone => {
                let value = self.row(&Event {
                    row: old,
                    old: None,
                    op: Op::Delete,
                    transaction,
                });
                push(out, key.clone(), Some(value));
            }
        }
    }

    /// The tombstone after a delete: kept by `rewrite-with-tombstone` only.
    fn tombstone(&self, key: &Option<Vec<u8>>, push: &mut Push<'_>, out: &mut Vec<OutRecord>) {
        if self.direct.mode() == DeleteMode::RewriteWithTombstone {
            push(out, key.clone(), None);
        }
    }

    /// The event's row with `__deleted` (rewrite modes) and the added fields.
    fn row(&self, event: &Event<'_>) -> Vec<u8> {
        let change = self.change;
        let rel = &change.relation;
        let streamed = !matches!(change.kind, ChangeKind::Read { .. });
        let mut out = Vec::with_capacity(64 * rel.columns.len() + 64);
        write_row(
            rel,
            event.row,
            event.old,
            &self.options.events,
            streamed,
            &mut out,
            &mut Vec::new(),
        );
        out.pop();
        let member = |out: &mut Vec<u8>, start: &[u8]| {
            if out.last() != Some(&b'{') {
                out.push(b',');
            }
            out.extend_from_slice(start);
        };
        if self.direct.rewrites() {
            member(&mut out, b"\"__deleted\":");
            let deleted = event.op == Op::Delete;
            out.extend_from_slice(if deleted { b"\"true\"" } else { b"\"false\"" });
        }
        for (start, at) in self.direct.fields() {
            member(&mut out, start.as_bytes());
            self.field(event, at, &mut out);
        }
        out.push(b'}');
        out
    }

    /// An added field's value, as the envelope holds it.
    fn field(&self, event: &Event<'_>, at: EventField<'_>, out: &mut Vec<u8>) {
        let change = self.change;
        let now = self.options.now_unix_nanos;
        let micros = change.commit_unix_micros;
        match at {
            EventField::Envelope("op") => {
                out.push(b'"');
                out.extend_from_slice(event.op.code().as_bytes());
                out.push(b'"');
            }
            EventField::Envelope("ts_ms") => write_int(out, now.div_euclid(1_000_000)),
            EventField::Envelope("ts_us") => write_int(out, now.div_euclid(1000)),
            EventField::Envelope(_) => write_int(out, now),
            EventField::Source(field) => match field {
                "version" => write_json_str(out, env!("CARGO_PKG_VERSION")),
                "connector" => out.extend_from_slice(b"\"postgresql\""),
                "name" => write_json_str(out, &self.identity.server_name),
                "ts_ms" => write_int(out, micros.div_euclid(1000)),
                "snapshot" => {
                    let marker = match &change.kind {
                        ChangeKind::Read { marker, .. } => *marker,
                        _ => SnapshotMarker::False,
                    };
                    write_json_str(out, marker.as_str());
                }
                "db" => write_json_str(out, &self.identity.database),
                "sequence" => {
                    let mut lsn = itoa::Buffer::new();
                    write_sequence(
                        change.last_commit_end,
                        lsn.format(change.lsn.0).as_bytes(),
                        out,
                    );
                }
                "ts_us" => write_int(out, micros),
                "ts_ns" => write_int(out, micros.saturating_mul(1000)),
                "schema" => write_json_str(out, &change.relation.schema_name),
                "table" => write_json_str(out, &change.relation.table_name),
                "txId" => write_int(out, change.xid),
                "lsn" => write_int(out, change.lsn.0),
                _ => out.extend_from_slice(b"null"),
            },
            EventField::Transaction(field) => match event.transaction {
                None => out.extend_from_slice(b"null"),
                Some(order) => match field {
                    "id" => {
                        out.push(b'"');
                        write_int(out, order.xid);
                        out.push(b':');
                        write_int(out, change.lsn.0);
                        out.push(b'"');
                    }
                    "total_order" => write_int(out, order.total_order),
                    _ => write_int(out, order.data_collection_order),
                },
            },
            EventField::Other => unreachable!("supports() refused it"),
        }
    }
}

#[cfg(test)]
mod tests;
