//! Turns decoded row changes into Kafka records in the Debezium envelope.
//!
//! This is the CPU-heavy part of the pipeline and runs on worker threads, in batches, while the
//! replication loop keeps reading; the publisher sends the batches in commit order. Values go
//! from pgoutput's text form straight to JSON bytes (`value::write_json`): no
//! intermediate data model.

pub(super) use super::cell::{Cell, cell, write_cell, write_datum};
pub use super::change::{ChangeKind, EncodeOptions, LogicalMessage, RowChange};
pub use super::column::{ColumnInfo, ColumnTreatment, FIRST_USER_OID};
use super::pgoutput::Datum;
use super::pgoutput::TupleData;
pub use super::relation::{OutboxLayout, RelationInfo, SourceIdentity};
use super::value;
use crate::event::EventFormat;
use crate::event::EventOptions;
use crate::event::HEADER_COMMIT_LSN;
use crate::event::HEADER_LSN;
use crate::event::HEADER_TX_INDEX;
use crate::event::Op;
use crate::event::SOURCE_END_TRANSACTION;
use crate::event::SnapshotMarker;
use crate::event::TransactionOrder;
use crate::event::write_int;
use crate::event::write_json_str;
use crate::kafka::OutRecord;
use base64::Engine as _;
use sluice_engine::Lsn;
use std::sync::Arc;

/// Encodes a change into its records, in order (`out` gets `record_count` records).
pub fn encode_change(change: &RowChange, options: &EncodeOptions, out: &mut Vec<OutRecord>) {
    let rel = &change.relation;
    if let Some(outbox) = &rel.outbox {
        // Only inserts (and a snapshot's rows) reach here (see the stream); a streamed row
        // without an aggregate type was refused before admission.
        let (row, streamed) = match &change.kind {
            ChangeKind::Insert { new } => (new, true),
            ChangeKind::Read { row, .. } => (row, false),
            _ => return,
        };
        let headers = position_headers(change.commit_lsn, change.lsn, change.tx_index);
        out.extend(outbox.encode(
            row,
            headers,
            (&rel.name, &rel.columns, &options.events, streamed),
        ));
        return;
    }
    let mut index = change.tx_index;
    let mut push = |out: &mut Vec<OutRecord>, key: Option<Vec<u8>>, value: Option<Vec<u8>>| {
        out.push(OutRecord {
            partition: None,
            topic: Arc::clone(&rel.topic),
            key,
            value,
            headers: position_headers(change.commit_lsn, change.lsn, index),
        });
        index += 1;
    };
    match &change.kind {
        ChangeKind::Insert { new } => {
            let value = envelope(
                change,
                options,
                None,
                Some((new, None)),
                Op::Create,
                change.transaction,
            );
            push(out, write_key(rel, new, &options.events, true), Some(value));
        }
        ChangeKind::Update {
            old,
            old_is_key_only,
            new,
            key_changed,
        } => {
            let before = old.as_ref();
            if *key_changed {
                let old = old.as_ref().expect("a key change comes with the old key");
                let old_key = write_key(rel, old, &options.events, true);
                let value = envelope(
                    change,
                    options,
                    before,
                    None,
                    Op::Delete,
                    change.transaction,
                );
                push(out, old_key.clone(), Some(value));
                if options.tombstones {
                    push(out, old_key, None);
                }
                let value = envelope(
                    change,
                    options,
                    None,
                    Some((new, None)),
                    Op::Create,
                    change.transaction.map(TransactionOrder::next),
                );
                push(out, write_key(rel, new, &options.events, true), Some(value));
            } else {
                let old_full = old.as_ref().filter(|_| !old_is_key_only);
                let value = envelope(
                    change,
                    options,
                    before,
                    Some((new, old_full)),
                    Op::Update,
                    change.transaction,
                );
                push(out, write_key(rel, new, &options.events, true), Some(value));
            }
        }
        ChangeKind::Delete { old, .. } => {
            let key = write_key(rel, old, &options.events, true);
            let value = envelope(
                change,
                options,
                Some(old),
                None,
                Op::Delete,
                change.transaction,
            );
            // Debezium follows a keyless table's delete with a tombstone too (null key).
            push(out, key.clone(), Some(value));
            if options.tombstones {
                push(out, key, None);
            }
        }
        ChangeKind::Truncate => {
            let value = envelope(
                change,
                options,
                None,
                None,
                Op::Truncate,
                change.transaction,
            );
            push(out, None, Some(value));
        }
        ChangeKind::Read { row, .. } => {
            let value = envelope(change, options, None, Some((row, None)), Op::Read, None);
            push(
                out,
                write_key(rel, row, &options.events, false),
                Some(value),
            );
        }
    }
}

/// Encodes a logical decoding message as Debezium does (`op: "m"`): its `source` block is
/// the change events' (`sequence`, `ts_us`, `ts_ns`, `xmin`, `origin`, `origin_lsn` included),
/// with empty `schema` and `table`, `transaction` null (Debezium fills it for no message), the
/// content in `binary_handling_mode`; in the events' formats under the message topic's schemas
/// ([`super::schema::message_topic_schemas`]) when the message carries them.
pub fn encode_message(
    message: &LogicalMessage,
    identity: &SourceIdentity,
    options: &EncodeOptions,
) -> OutRecord {
    let now_unix_nanos = options.now_unix_nanos;
    let mut key = Vec::with_capacity(message.prefix.len() + 16);
    key.extend_from_slice(b"{\"prefix\":");
    write_json_str(&mut key, &message.prefix);
    key.push(b'}');
    let mut value = Vec::with_capacity(message.content.len() * 4 / 3 + 256);
    value.extend_from_slice(b"{\"op\":\"m\",\"ts_ms\":");
    write_int(&mut value, now_unix_nanos.div_euclid(1_000_000));
    value.extend_from_slice(b",\"source\":{\"version\":");
    write_json_str(&mut value, env!("CARGO_PKG_VERSION"));
    value.extend_from_slice(b",\"connector\":\"postgresql\",\"name\":");
    write_json_str(&mut value, &identity.server_name);
    value.extend_from_slice(b",\"ts_ms\":");
    write_int(&mut value, message.commit_unix_micros.div_euclid(1000));
    value.extend_from_slice(b",\"snapshot\":\"false\",\"db\":");
    write_json_str(&mut value, &identity.database);
    value.extend_from_slice(b",\"sequence\":");
    let mut lsn = itoa::Buffer::new();
    let lsn = lsn.format(message.lsn.0).as_bytes();
    write_sequence(message.last_commit_end, lsn, &mut value);
    write_source_micros(message.commit_unix_micros, &mut value);
    value.extend_from_slice(b",\"schema\":\"\",\"table\":\"\",\"txId\":");
    match message.xid {
        Some(xid) => write_int(&mut value, xid),
        None => value.extend_from_slice(b"null"),
    }
    value.extend_from_slice(b",\"lsn\":");
    value.extend_from_slice(lsn);
    value.extend_from_slice(b",\"xmin\":null,\"origin\":null,\"origin_lsn\":null");
    value.extend_from_slice(b"},\"transaction\":null,\"message\":{\"prefix\":");
    write_json_str(&mut value, &message.prefix);
    value.extend_from_slice(b",\"content\":\"");
    match options.events.binary_handling_mode.base64_engine() {
        Some(engine) => value.extend_from_slice(engine.encode(&message.content).as_bytes()),
        None => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for byte in message.content.iter() {
                value.push(HEX[usize::from(byte >> 4)]);
                value.push(HEX[usize::from(byte & 0x0f)]);
            }
        }
    }
    value.extend_from_slice(b"\"}}");
    let record = OutRecord {
        partition: None,
        topic: Arc::clone(&message.topic),
        key: Some(key),
        value: Some(value),
        headers: position_headers(message.commit_lsn, message.lsn, message.tx_index),
    };
    match &message.schemas {
        Some(schemas) => schemas.wrap_record(&options.events, record),
        None => record,
    }
}

/// Debezium's `source.sequence`: a JSON string holding the JSON array of the last commit's
/// end LSN (`null` when none) and the change's LSN, both as strings.
pub(super) fn write_sequence(last_commit_end: Option<Lsn>, lsn_digits: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"\"[");
    match last_commit_end {
        Some(end) => {
            out.extend_from_slice(b"\\\"");
            write_int(out, end.0);
            out.extend_from_slice(b"\\\"");
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\\\"");
    out.extend_from_slice(lsn_digits);
    out.extend_from_slice(b"\\\"]\"");
}

/// `,"ts_us":…,"ts_ns":…` of the `source` block (the commit time; Debezium's nanoseconds are
/// its microseconds × 1000). One integer formatting: the nanoseconds are the same digits and
/// `000` (hot path: every event).
fn write_source_micros(unix_micros: i64, out: &mut Vec<u8>) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(unix_micros).as_bytes();
    out.extend_from_slice(b",\"ts_us\":");
    out.extend_from_slice(digits);
    out.extend_from_slice(b",\"ts_ns\":");
    if unix_micros > 0 && unix_micros < i64::MAX / 1000 {
        out.extend_from_slice(digits);
        out.extend_from_slice(b"000");
    } else {
        write_int(out, unix_micros.saturating_mul(1000));
    }
}

/// `","ts_ms":…,"ts_us":…,"ts_ns":…` after the envelope's `op` (when the event was made). One
/// integer formatting: the milliseconds and microseconds are prefixes of the nanoseconds'
/// digits (hot path: every event).
fn write_envelope_times(now_unix_nanos: i64, out: &mut Vec<u8>) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(now_unix_nanos).as_bytes();
    // Any time after 1970-01-01 00:00:01 has at least 10 digits and no sign.
    if now_unix_nanos >= 1_000_000_000 {
        out.extend_from_slice(b"\",\"ts_ms\":");
        out.extend_from_slice(&digits[..digits.len() - 6]);
        out.extend_from_slice(b",\"ts_us\":");
        out.extend_from_slice(&digits[..digits.len() - 3]);
    } else {
        out.extend_from_slice(b"\",\"ts_ms\":");
        write_int(out, now_unix_nanos.div_euclid(1_000_000));
        out.extend_from_slice(b",\"ts_us\":");
        write_int(out, now_unix_nanos.div_euclid(1000));
    }
    out.extend_from_slice(b",\"ts_ns\":");
    out.extend_from_slice(digits);
}

pub fn position_headers(
    commit_lsn: Lsn,
    lsn: Lsn,
    tx_index: u32,
) -> Vec<(std::borrow::Cow<'static, str>, String)> {
    vec![
        (HEADER_COMMIT_LSN.into(), commit_lsn.0.to_string()),
        (HEADER_LSN.into(), lsn.0.to_string()),
        (HEADER_TX_INDEX.into(), tx_index.to_string()),
    ]
}

/// The key object, or `None` when the table has no key.
pub fn write_key(
    rel: &RelationInfo,
    tuple: &TupleData,
    events: &EventOptions,
    streamed: bool,
) -> Option<Vec<u8>> {
    if rel.key_columns.is_empty() {
        return None;
    }
    if events.key_format() == EventFormat::Avro
        && let Some(layout) = &rel.avro
    {
        return super::avro::write_key(layout, rel, tuple, events, streamed);
    }
    let schema = rel
        .schemas
        .as_ref()
        .filter(|_| events.key_format() == EventFormat::JsonWithSchemas)
        .and_then(|s| s.key_head.as_deref());
    let mut key = Vec::with_capacity(32 + schema.map_or(0, <[u8]>::len));
    if let Some(head) = schema {
        key.extend_from_slice(head);
    }
    key.push(b'{');
    for (n, &index) in rel.key_columns.iter().enumerate() {
        if n > 0 {
            key.push(b',');
        }
        let column = &rel.columns[index];
        key.extend_from_slice(&column.json_label);
        write_datum(
            &rel.name,
            column,
            tuple.0.get(index),
            &mut key,
            events,
            streamed,
        );
    }
    key.push(b'}');
    if schema.is_some() {
        key.push(b'}');
    }
    if events.key_format() == EventFormat::Avro {
        let schemas = rel.schemas.as_ref();
        let (schema, id) = schemas
            .and_then(|s| Some((s.key.as_ref()?, s.registered?.key?)))
            .unwrap_or_else(|| panic!("{}: no registered Avro key schema (a bug)", rel.name));
        return Some(crate::event::avro::to_wire(&rel.name, schema, id, &key));
    }
    Some(key)
}

/// The value envelope. `before` is the old row (or key); `after` is `(row, old full row)` so
/// unchanged TOASTed values can be taken from the old row when the server sent one.
fn envelope(
    change: &RowChange,
    options: &EncodeOptions,
    before: Option<&TupleData>,
    after: Option<(&TupleData, Option<&TupleData>)>,
    op: Op,
    transaction: Option<TransactionOrder>,
) -> Vec<u8> {
    let rel = &change.relation;
    if options.events.value_format() == EventFormat::Avro
        && let Some(layout) = &rel.avro
    {
        return super::avro::write_envelope(
            layout,
            change,
            options,
            before,
            after,
            op,
            transaction,
        );
    }
    let schema = rel
        .schemas
        .as_ref()
        .filter(|_| options.events.value_format() == EventFormat::JsonWithSchemas)
        .map(|s| &*s.value_head);
    let streamed = !matches!(change.kind, ChangeKind::Read { .. });
    let events = &options.events;
    // Sized from the values so that the buffer is not grown (a copy into one twice as large,
    // which librdkafka then holds until the delivery report: the produce path is zero-copy).
    let values = before.map_or(0, tuple_bytes)
        + after.map_or(0, |(row, old)| {
            tuple_bytes(row) + old.map_or(0, tuple_bytes)
        });
    let mut out = Vec::with_capacity(rel.envelope_overhead + values + 16 * rel.columns.len());
    if let Some(head) = schema {
        out.extend_from_slice(head);
    }
    out.extend_from_slice(b"{\"before\":");
    match before {
        Some(row) => write_row(rel, row, None, events, streamed, &mut out, &mut Vec::new()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"after\":");
    let mut unavailable = Vec::new();
    match after {
        Some((row, old)) => {
            write_row(rel, row, old, events, streamed, &mut out, &mut unavailable);
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"source\":");
    out.extend_from_slice(rel.source_head.as_bytes());
    write_int(&mut out, change.commit_unix_micros.div_euclid(1000));
    out.extend_from_slice(b",\"snapshot\":\"");
    let marker = match &change.kind {
        ChangeKind::Read { marker, .. } => *marker,
        _ => SnapshotMarker::False,
    };
    out.extend_from_slice(marker.as_str().as_bytes());
    out.push(b'"');
    out.extend_from_slice(rel.source_db.as_bytes());
    // The LSN is written twice (`sequence`, `lsn`): formatted once.
    let mut lsn = itoa::Buffer::new();
    let lsn = lsn.format(change.lsn.0).as_bytes();
    write_sequence(change.last_commit_end, lsn, &mut out);
    write_source_micros(change.commit_unix_micros, &mut out);
    out.extend_from_slice(rel.source_tail.as_bytes());
    write_int(&mut out, change.xid);
    out.extend_from_slice(b",\"lsn\":");
    out.extend_from_slice(lsn);
    match transaction {
        None => out.extend_from_slice(SOURCE_END_TRANSACTION),
        Some(order) => {
            out.extend_from_slice(
                SOURCE_END_TRANSACTION
                    .strip_suffix(b"null")
                    .unwrap_or(SOURCE_END_TRANSACTION),
            );
            order.write(change.lsn.0, &mut out);
        }
    }
    out.extend_from_slice(b",\"op\":\"");
    out.extend_from_slice(op.code().as_bytes());
    write_envelope_times(options.now_unix_nanos, &mut out);
    if !unavailable.is_empty() {
        out.extend_from_slice(b",\"unavailable_columns\":[");
        for (n, index) in unavailable.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            write_json_str(&mut out, &rel.columns[*index].name);
        }
        out.push(b']');
    }
    out.push(b'}');
    if schema.is_some() {
        out.push(b'}');
    }
    if options.events.value_format() == EventFormat::Avro {
        let schemas = rel.schemas.as_ref();
        let (schema, id) = schemas
            .and_then(|s| Some((&s.envelope, s.registered?.value)))
            .unwrap_or_else(|| panic!("{}: no registered Avro value schema (a bug)", rel.name));
        return crate::event::avro::to_wire(&rel.name, schema, id, &out);
    }
    out
}

/// The bytes of a row's values as received (text or binary), a floor for their JSON: quotes
/// and escapes add to it (the envelope's capacity has 16 bytes per column for that, and a
/// snapshot's size estimate counts the values twice).
pub(super) fn tuple_bytes(row: &TupleData) -> usize {
    row.0
        .iter()
        .map(|datum| match datum {
            Datum::Text(b) | Datum::Binary(b) => b.len(),
            _ => 0,
        })
        .sum()
}

/// Writes a row object: every column, as Debezium does (an old key from the server, under
/// REPLICA IDENTITY DEFAULT, has its other columns null). Unchanged TOASTed values are taken
/// from `old` when it has them, otherwise Debezium's placeholder, or (with
/// `kafka.events.unavailable_columns`) left out and their column index pushed to
/// `unavailable`.
pub(super) fn write_row(
    rel: &RelationInfo,
    row: &TupleData,
    old: Option<&TupleData>,
    events: &EventOptions,
    streamed: bool,
    out: &mut Vec<u8>,
    unavailable: &mut Vec<usize>,
) {
    out.push(b'{');
    let mut first = true;
    for (index, column) in rel.columns.iter().enumerate() {
        let datum = match cell(column, index, row, old, events) {
            Cell::Skip => continue,
            Cell::Unavailable => {
                unavailable.push(index);
                continue;
            }
            Cell::Placeholder => None,
            Cell::Value(datum) => Some(datum),
        };
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(&column.json_label);
        match datum {
            Some(datum) => write_cell(&rel.name, column, datum, events, streamed, out),
            None => value::write_unavailable(column.value_type, events, out),
        }
    }
    out.push(b'}');
}

/// Whether the key columns differ between an old and a new tuple.
pub fn key_differs(rel: &RelationInfo, old: &TupleData, new: &TupleData) -> bool {
    rel.key_columns.iter().any(|&index| {
        match (old.0.get(index), new.0.get(index)) {
            // An unchanged TOASTed key column did not change.
            (_, Some(Datum::UnchangedToast)) => false,
            (a, b) => a != b,
        }
    })
}

/// Where a record came from, from its headers: `LSN 0/1A2B`.
pub(super) fn record_position(record: &OutRecord) -> String {
    let lsn = record
        .headers
        .iter()
        .find(|(name, _)| *name == crate::event::HEADER_LSN)
        .map(|(_, v)| Lsn(v.parse().unwrap_or(0)).to_string())
        .unwrap_or_default();
    format!("LSN {lsn}")
}

#[cfg(test)]
mod tests {
    use super::super::pgoutput::ReplicaIdentity;
    use super::*;
    use crate::runtime::metrics::TableMetrics;
    use bytes::Bytes;
    use serde_json::{Value, json};

    fn relation() -> Arc<RelationInfo> {
        Arc::new(RelationInfo::new(
            &SourceIdentity {
                server_name: "app".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "users",
            vec![
                ("id".into(), 23, -1),
                ("name".into(), 25, -1),
                ("bio".into(), 25, -1),
            ],
            &["id".to_owned()],
            ReplicaIdentity::Default,
            Arc::new(TableMetrics::new("public.users")),
        ))
    }

    fn text(s: &str) -> Datum {
        Datum::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn change(kind: ChangeKind) -> RowChange {
        RowChange {
            relation: relation(),
            kind,
            commit_lsn: Lsn(0x100),
            lsn: Lsn(0x80),
            tx_index: 4,
            xid: 77,
            commit_unix_micros: 1_700_000_000_123_456,
            last_commit_end: Some(Lsn(0x40)),
            size_hint: 1,
            transaction: None,
        }
    }

    #[test]
    fn transaction_blocks_number_a_key_change_as_two_events() {
        let old = TupleData(vec![text("1"), Datum::Null, Datum::Null]);
        let new = TupleData(vec![text("2"), text("x"), text("y")]);
        let mut key_change = change(ChangeKind::Update {
            old: Some(old),
            old_is_key_only: true,
            new,
            key_changed: true,
        });
        key_change.transaction = Some(TransactionOrder {
            xid: 77,
            total_order: 3,
            data_collection_order: 2,
        });
        let blocks: Vec<Value> = encode(&key_change)
            .into_iter()
            .filter_map(|(_, v, _)| v.map(|v| v["transaction"].clone()))
            .collect();
        assert_eq!(
            blocks,
            vec![
                json!({"id": "77:128", "total_order": 3, "data_collection_order": 2}),
                json!({"id": "77:128", "total_order": 4, "data_collection_order": 3}),
            ]
        );
        // Without metadata: null, as Debezium's default.
        let insert = change(ChangeKind::Insert {
            new: TupleData(vec![text("1"), text("a"), text("b")]),
        });
        assert_eq!(
            encode(&insert)[0].1.as_ref().unwrap()["transaction"],
            json!(null)
        );
    }

    type Decoded = (
        Option<Value>,
        Option<Value>,
        Vec<(std::borrow::Cow<'static, str>, String)>,
    );

    fn encode(change: &RowChange) -> Vec<Decoded> {
        let mut out = Vec::new();
        let options = EncodeOptions {
            tombstones: true,
            events: EventOptions {
                unavailable_columns: true,
                ..EventOptions::default()
            },
            now_unix_nanos: 5_000_000,
        };
        encode_change(change, &options, &mut out);
        assert_eq!(out.len() as u32, change.record_count(true));
        out.into_iter()
            .map(|r| {
                let parse =
                    |b: Option<Vec<u8>>| b.map(|b| serde_json::from_slice::<Value>(&b).unwrap());
                (parse(r.key), parse(r.value), r.headers)
            })
            .collect()
    }

    #[test]
    fn insert_is_a_debezium_create() {
        let row = TupleData(vec![text("1"), text("ann \"a\""), Datum::Null]);
        let records = encode(&change(ChangeKind::Insert { new: row }));
        let (key, value, headers) = &records[0];
        assert_eq!(key.as_ref().unwrap(), &json!({"id": 1}));
        assert_eq!(
            value.as_ref().unwrap(),
            &json!({
                "before": null,
                "after": {"id": 1, "name": "ann \"a\"", "bio": null},
                "source": {
                    "version": env!("CARGO_PKG_VERSION"), "connector": "postgresql", "name": "app",
                    "ts_ms": 1_700_000_000_123i64, "snapshot": "false", "db": "db",
                    "sequence": "[\"64\",\"128\"]", "ts_us": 1_700_000_000_123_456i64,
                    "ts_ns": 1_700_000_000_123_456_000i64,
                    "schema": "public", "table": "users", "txId": 77, "lsn": 128, "xmin": null,
                    "origin": null, "origin_lsn": null
                },
                "transaction": null,
                "op": "c",
                "ts_ms": 5,
                "ts_us": 5000,
                "ts_ns": 5_000_000
            })
        );
        assert_eq!(
            headers,
            &vec![
                (HEADER_COMMIT_LSN.into(), "256".to_owned()),
                (HEADER_LSN.into(), "128".to_owned()),
                (HEADER_TX_INDEX.into(), "4".to_owned())
            ]
        );
    }

    /// The encoder's cost per change, for before/after comparisons of the envelope:
    /// `cargo test --release -p sluice --lib -- --ignored encode_cost --nocapture`.
    #[test]
    #[ignore = "a measurement, run on demand in release"]
    fn encode_cost() {
        let rel = Arc::new(RelationInfo::new(
            &SourceIdentity {
                server_name: "bench".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "t",
            vec![
                ("id".into(), 20, -1),
                ("v".into(), 20, -1),
                ("payload".into(), 25, -1),
                ("amount".into(), 1700, (10 << 16) + 2 + 4),
                ("at".into(), 1184, -1),
            ],
            &["id".to_owned()],
            ReplicaIdentity::Default,
            Arc::new(TableMetrics::new("public.t")),
        ));
        let changes: Vec<RowChange> = (0..200_000i64)
            .map(|i| RowChange {
                relation: Arc::clone(&rel),
                kind: ChangeKind::Insert {
                    new: TupleData(vec![
                        text(&i.to_string()),
                        text("0"),
                        text(&format!("{:0200}", i)),
                        text("1234.56"),
                        text("2020-04-01 11:51:02.123456+00"),
                    ]),
                },
                commit_lsn: Lsn(0x1000_0000 + i as u64 * 200),
                lsn: Lsn(0x1000_0000 + i as u64 * 200),
                tx_index: i as u32,
                xid: 77,
                commit_unix_micros: 1_700_000_000_123_456,
                last_commit_end: Some(Lsn(0x1000_0000)),
                size_hint: 1,
                transaction: None,
            })
            .collect();
        let options = EncodeOptions {
            tombstones: true,
            events: EventOptions::default(),
            now_unix_nanos: 1_700_000_000_123_456_789,
        };
        let mut best = f64::MAX;
        let mut bytes = 0;
        for _ in 0..5 {
            let mut out = Vec::with_capacity(changes.len());
            let started = std::time::Instant::now();
            for change in &changes {
                encode_change(change, &options, &mut out);
            }
            best = best.min(started.elapsed().as_secs_f64());
            bytes = out
                .iter()
                .map(|r| r.value.as_ref().map_or(0, Vec::len))
                .sum::<usize>();
        }
        println!(
            "encode_cost: {:.0} ns per change (best of 5 × {} changes), {} value bytes per change",
            best * 1e9 / changes.len() as f64,
            changes.len(),
            bytes / changes.len()
        );
    }

    #[test]
    fn times_are_written_from_one_formatting_as_from_three() {
        for nanos in [
            0,
            5_000_000,
            999_999_999,
            1_000_000_000,
            1_700_000_000_123_456_789,
        ] {
            let mut out = Vec::new();
            write_envelope_times(nanos, &mut out);
            let expected = format!(
                "\",\"ts_ms\":{},\"ts_us\":{},\"ts_ns\":{nanos}",
                nanos / 1_000_000,
                nanos / 1000
            );
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
        for micros in [-1, 0, 1, 1_700_000_000_123_456, i64::MAX] {
            let mut out = Vec::new();
            write_source_micros(micros, &mut out);
            let expected = format!(
                ",\"ts_us\":{micros},\"ts_ns\":{}",
                micros.saturating_mul(1000)
            );
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }

    #[test]
    fn message_source_is_the_change_events_source() {
        let message = LogicalMessage {
            topic: Arc::from("app.message"),
            prefix: "audit".into(),
            content: Bytes::from_static(b"hello"),
            lsn: Lsn(0x90),
            commit_lsn: Lsn(0x100),
            tx_index: 0,
            xid: Some(77),
            commit_unix_micros: 1_700_000_000_123_456,
            last_commit_end: None,
            schemas: None,
        };
        let identity = SourceIdentity {
            server_name: "app".into(),
            database: "db".into(),
            registry: None,
        };
        let options = EncodeOptions {
            tombstones: true,
            events: crate::event::EventOptions::default(),
            now_unix_nanos: 5_000_000,
        };
        let record = encode_message(&message, &identity, &options);
        let value: Value = serde_json::from_slice(record.value.as_ref().unwrap()).unwrap();
        assert_eq!(
            value,
            json!({
                "op": "m",
                "ts_ms": 5,
                "source": {
                    "version": env!("CARGO_PKG_VERSION"), "connector": "postgresql", "name": "app",
                    "ts_ms": 1_700_000_000_123i64, "snapshot": "false", "db": "db",
                    "sequence": "[null,\"144\"]", "ts_us": 1_700_000_000_123_456i64,
                    "ts_ns": 1_700_000_000_123_456_000i64, "schema": "", "table": "",
                    "txId": 77, "lsn": 144, "xmin": null, "origin": null, "origin_lsn": null
                },
                "transaction": null,
                "message": {"prefix": "audit", "content": "aGVsbG8="}
            })
        );
    }

    #[test]
    fn unchanged_toast_is_marked_not_nulled() {
        let new = TupleData(vec![text("1"), text("bo"), Datum::UnchangedToast]);
        let records = encode(&change(ChangeKind::Update {
            old: None,
            old_is_key_only: false,
            new,
            key_changed: false,
        }));
        let value = records[0].1.as_ref().unwrap();
        assert_eq!(value["op"], "u");
        assert_eq!(value["after"], json!({"id": 1, "name": "bo"}));
        assert_eq!(value["unavailable_columns"], json!(["bio"]));
    }

    #[test]
    fn unchanged_toast_is_debezium_placeholder_by_default() {
        let new = TupleData(vec![text("1"), text("bo"), Datum::UnchangedToast]);
        let change = change(ChangeKind::Update {
            old: None,
            old_is_key_only: false,
            new,
            key_changed: false,
        });
        let mut out = Vec::new();
        let options = EncodeOptions {
            tombstones: true,
            events: EventOptions::default(),
            now_unix_nanos: 5_000_000,
        };
        encode_change(&change, &options, &mut out);
        let value: Value = serde_json::from_slice(out[0].value.as_ref().unwrap()).unwrap();
        assert_eq!(
            value["after"],
            json!({"id": 1, "name": "bo", "bio": "__debezium_unavailable_value"})
        );
        assert!(value.get("unavailable_columns").is_none(), "{value}");
    }

    #[test]
    fn key_change_is_delete_tombstone_create_with_increasing_indexes() {
        let old = TupleData(vec![text("1"), Datum::Null, Datum::Null]);
        let new = TupleData(vec![text("2"), text("x"), text("y")]);
        let rel = relation();
        assert!(key_differs(&rel, &old, &new));
        let records = encode(&change(ChangeKind::Update {
            old: Some(old),
            old_is_key_only: true,
            new,
            key_changed: true,
        }));
        let summary: Vec<(Value, Option<Value>, String)> = records
            .iter()
            .map(|(k, v, h)| {
                (
                    k.clone().unwrap(),
                    v.as_ref().map(|v| v["op"].clone()),
                    h[2].1.clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (json!({"id": 1}), Some(json!("d")), "4".to_owned()),
                (json!({"id": 1}), None, "5".to_owned()),
                (json!({"id": 2}), Some(json!("c")), "6".to_owned()),
            ]
        );
        // Every column, as Debezium: the old key's other columns are null.
        assert_eq!(
            records[0].1.as_ref().unwrap()["before"],
            json!({"id": 1, "name": null, "bio": null})
        );
    }

    #[test]
    fn delete_is_followed_by_a_tombstone() {
        let old = TupleData(vec![text("3"), Datum::Null, Datum::Null]);
        let records = encode(&change(ChangeKind::Delete {
            old,
            old_is_key_only: true,
        }));
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].1.as_ref().unwrap()["op"], "d");
        assert_eq!(records[0].1.as_ref().unwrap()["after"], Value::Null);
        assert_eq!(records[1].0.as_ref().unwrap(), &json!({"id": 3}));
        assert!(records[1].1.is_none());
    }

    #[test]
    fn keyless_delete_is_followed_by_a_null_keyed_tombstone() {
        let keyless = Arc::new(RelationInfo::new(
            &SourceIdentity {
                server_name: "app".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "log",
            vec![("a".into(), 23, -1)],
            &[],
            ReplicaIdentity::Full,
            Arc::new(TableMetrics::new("public.log")),
        ));
        let mut change = change(ChangeKind::Delete {
            old: TupleData(vec![text("7")]),
            old_is_key_only: false,
        });
        change.relation = keyless;
        let records = encode(&change);
        assert_eq!(records.len(), 2);
        assert!(records[0].0.is_none());
        assert_eq!(records[0].1.as_ref().unwrap()["before"], json!({"a": 7}));
        assert!(records[1].0.is_none() && records[1].1.is_none());
    }

    #[test]
    fn snapshot_reads_carry_their_marker() {
        for marker in [
            SnapshotMarker::First,
            SnapshotMarker::Last,
            SnapshotMarker::Incremental,
        ] {
            let row = TupleData(vec![text("1"), Datum::Null, Datum::Null]);
            let records = encode(&change(ChangeKind::Read { row, marker }));
            let value = records[0].1.as_ref().unwrap();
            assert_eq!(value["op"], "r");
            assert_eq!(value["source"]["snapshot"], marker.as_str());
        }
        assert_eq!(
            SnapshotMarker::of(true, false, true, false),
            SnapshotMarker::First
        );
        assert_eq!(
            SnapshotMarker::of(false, false, true, true),
            SnapshotMarker::LastInDataCollection
        );
        assert_eq!(
            SnapshotMarker::of(true, true, true, true),
            SnapshotMarker::Last
        );
        assert_eq!(
            SnapshotMarker::of(false, false, false, false),
            SnapshotMarker::True
        );
    }
}
