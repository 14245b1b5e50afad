//! Turns decoded row changes into Kafka records in the Debezium envelope.
//!
//! This is the CPU-heavy part of the pipeline and runs on worker threads, in batches, while the
//! replication loop keeps reading; the publisher sends the batches in commit order. Values go
//! from pgoutput's text form straight to JSON bytes (`value::write_json`): no
//! intermediate data model.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use sluice_engine::Lsn;

use super::pgoutput::{Datum, ReplicaIdentity, TupleData};
use super::setup::UserType;
use super::value;
use crate::event::schema::RenderedSchemas;
use crate::event::{
    EventFormat, EventOptions, HEADER_COMMIT_LSN, HEADER_LSN, HEADER_TX_INDEX, Op,
    SOURCE_END_TRANSACTION, SnapshotMarker, TransactionOrder, write_int, write_json_str,
};
use crate::kafka::OutRecord;
use crate::runtime::metrics::TableMetrics;

/// A captured table as the last Relation message described it.
#[derive(Debug)]
pub struct RelationInfo {
    /// `schema.table`.
    pub name: String,
    /// The table's topic.
    pub topic: Arc<str>,
    /// Columns in the order of tuple data.
    pub columns: Vec<ColumnInfo>,
    /// Indexes (into `columns`) of the key columns, in order; empty = no key (null keys).
    pub key_columns: Vec<usize>,
    /// The table's replica identity.
    pub replica_identity: ReplicaIdentity,
    /// The `source` block up to `"ts_ms":`.
    source_head: String,
    /// The `source` block from after `snapshot` up to `"sequence":`.
    source_db: String,
    /// The `source` block from after `ts_ns` up to `"txId":`.
    source_tail: String,
    /// Per-table counters.
    pub metrics: Arc<TableMetrics>,
    /// A rough per-change overhead of the JSON envelope, for the in-flight budget.
    pub envelope_overhead: usize,
    /// Set when the table is the pipeline's outbox: inserts become routed events.
    pub outbox: Option<Arc<OutboxLayout>>,
    /// Left out by `source.postgres.exclude_tables`: its changes emit nothing.
    pub excluded: bool,
    /// The key and envelope schemas (`kafka.events.schemas_enable`), rendered once.
    pub schemas: Option<RenderedSchemas>,
    /// The `source` block's constant parts as Avro.
    pub(super) avro_source: super::avro::AvroSource,
    /// How events are written as Avro, once the schemas are registered.
    pub(super) avro: Option<super::avro::AvroLayout>,
}

/// Where the outbox's parts are in its rows.
#[derive(Debug)]
pub struct OutboxLayout {
    /// The topic with `{aggregate_type}` to replace.
    pub topic: String,
    /// The routing column.
    pub aggregate_type: usize,
    /// The key column.
    pub aggregate_id: usize,
    /// The value column.
    pub payload: usize,
    /// Every other column, as a header of its name.
    pub headers: Vec<(usize, std::borrow::Cow<'static, str>)>,
}

impl OutboxLayout {
    /// Finds the configured columns in the table's columns.
    ///
    /// # Errors
    ///
    /// The configuration key of a column the table does not have, and the columns it has.
    pub fn resolve(
        columns: &[ColumnInfo],
        config: &super::config::OutboxConfig,
    ) -> Result<Self, (String, String)> {
        let find = |key: &str, name: &str| {
            columns.iter().position(|c| c.name == name).ok_or_else(|| {
                let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                (
                    format!("source.postgres.outbox.{key}"),
                    format!(
                        "the outbox table {} has no column {name:?}; its columns: {}",
                        config.table,
                        names.join(", ")
                    ),
                )
            })
        };
        let aggregate_type = find("aggregate_type_column", &config.aggregate_type_column)?;
        let aggregate_id = find("aggregate_id_column", &config.aggregate_id_column)?;
        let payload = find("payload_column", &config.payload_column)?;
        let headers = columns
            .iter()
            .enumerate()
            .filter(|(i, _)| ![aggregate_type, aggregate_id, payload].contains(i))
            .map(|(i, c)| (i, std::borrow::Cow::Owned(c.name.clone())))
            .collect();
        Ok(Self {
            topic: config.topic.clone(),
            aggregate_type,
            aggregate_id,
            payload,
            headers,
        })
    }

    /// The topic of an outbox row; `None` when its aggregate type is NULL.
    pub fn topic_of(&self, row: &TupleData) -> Option<String> {
        match row.0.get(self.aggregate_type) {
            Some(Datum::Text(t)) => Some(
                self.topic
                    .replace("{aggregate_type}", &String::from_utf8_lossy(t)),
            ),
            _ => None,
        }
    }

    /// The event of an inserted outbox row: key = aggregate id, value = payload (NULL → a
    /// tombstone), the other columns as headers after the position headers.
    fn encode(
        &self,
        row: &TupleData,
        mut headers: Vec<(std::borrow::Cow<'static, str>, String)>,
    ) -> Option<OutRecord> {
        let bytes = |i: usize| match row.0.get(i) {
            Some(Datum::Text(t) | Datum::Binary(t)) => Some(t.to_vec()),
            _ => None,
        };
        for (i, name) in &self.headers {
            if let Some(Datum::Text(value)) = row.0.get(*i) {
                headers.push((name.clone(), String::from_utf8_lossy(value).into_owned()));
            }
        }
        Some(OutRecord {
            partition: None,
            topic: Arc::from(self.topic_of(row)?),
            key: bytes(self.aggregate_id),
            value: bytes(self.payload),
            headers,
        })
    }
}

/// One column.
#[derive(Debug)]
pub struct ColumnInfo {
    /// `"name":` with the name escaped.
    pub json_label: Vec<u8>,
    /// The name.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
    /// Type modifier (`atttypmod`).
    pub type_modifier: i32,
    /// The type its values are mapped as: `type_oid` unless the catalog resolved it (a
    /// domain's base type, `value::ENUM_ARRAY_OID` for an enum's array).
    pub value_type: u32,
    /// The type modifier its values are mapped with (a domain's when the column has none).
    pub value_modifier: i32,
    /// Debezium leaves the column out of its events (a composite type, an array it does not
    /// map): so does sluice.
    pub left_out: bool,
    /// What the pipeline's column rules do with its values (keys are never changed).
    pub treatment: ColumnTreatment,
    /// Whether the type is the `hstore` extension's (its OID differs per database), written as
    /// `hstore_handling_mode` says.
    pub is_hstore: bool,
    /// `NOT NULL` (from the catalog, [`RelationInfo::mark_not_null`]): where sluice has no
    /// value for it (a delete's old key under REPLICA IDENTITY DEFAULT or USING INDEX, a value
    /// Debezium does not map), Debezium writes its type's zero, not null (Connect's required
    /// fields cannot hold null), and so does sluice.
    pub not_null: bool,
}

/// A column rule's effect on a column's values in `before`/`after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColumnTreatment {
    /// As is.
    #[default]
    Keep,
    /// Left out.
    Exclude,
    /// Replaced by `"****"` (NULL stays null).
    Mask,
    /// Replaced by the hex SHA-256 of its text form (NULL stays null): joinable, not readable.
    Hash,
}

/// PostgreSQL's first OID for objects created after `initdb` (`FirstNormalObjectId`).
pub const FIRST_USER_OID: u32 = 16384;

/// What every event's `source` block names besides the table.
#[derive(Debug, Clone)]
pub struct SourceIdentity {
    /// The logical server name (the topic prefix).
    pub server_name: String,
    /// The database name.
    pub database: String,
    /// The schema registry, when keys or values are Avro (`[schema_registry]`).
    pub registry: Option<Arc<crate::registry::Registry>>,
}

impl RelationInfo {
    /// Describes a relation; `key_columns` are the primary key's column names (or the replica
    /// identity's when there is no primary key).
    pub fn new(
        identity: &SourceIdentity,
        schema: &str,
        table: &str,
        columns: Vec<(String, u32, i32)>,
        key_names: &[String],
        replica_identity: ReplicaIdentity,
        metrics: Arc<TableMetrics>,
    ) -> Self {
        let name = format!("{schema}.{table}");
        let topic: Arc<str> = Arc::from(format!("{}.{name}", identity.server_name));
        let columns: Vec<ColumnInfo> = columns
            .into_iter()
            .map(|(name, type_oid, type_modifier)| {
                let mut json_label = Vec::with_capacity(name.len() + 3);
                write_json_str(&mut json_label, &name);
                json_label.push(b':');
                ColumnInfo {
                    json_label,
                    name,
                    type_oid,
                    type_modifier,
                    value_type: type_oid,
                    value_modifier: type_modifier,
                    left_out: value::is_left_out(type_oid),
                    treatment: ColumnTreatment::Keep,
                    is_hstore: false,
                    not_null: false,
                }
            })
            .collect();
        let key_columns = key_names
            .iter()
            .filter_map(|key| columns.iter().position(|c| &c.name == key))
            .collect();
        let mut head = Vec::new();
        head.extend_from_slice(b"{\"version\":");
        write_json_str(&mut head, env!("CARGO_PKG_VERSION"));
        head.extend_from_slice(b",\"connector\":\"postgresql\",\"name\":");
        write_json_str(&mut head, &identity.server_name);
        head.extend_from_slice(b",\"ts_ms\":");
        let mut db = Vec::new();
        db.extend_from_slice(b",\"db\":");
        write_json_str(&mut db, &identity.database);
        db.extend_from_slice(b",\"sequence\":");
        let mut tail = Vec::new();
        tail.extend_from_slice(b",\"schema\":");
        write_json_str(&mut tail, schema);
        tail.extend_from_slice(b",\"table\":");
        write_json_str(&mut tail, table);
        tail.extend_from_slice(b",\"txId\":");
        let envelope_overhead = 2 * columns.iter().map(|c| c.json_label.len()).sum::<usize>()
            + head.len()
            + db.len()
            + tail.len()
            // The rest of the envelope and the key: `sequence` (two LSNs), `source.ts_us`/`ts_ns`,
            // `txId`, `lsn`, `xmin`/`origin`/`origin_lsn`, `transaction`, `op`, the envelope's
            // `ts_ms`/`ts_us`/`ts_ns`, the key's braces: about 400 bytes.
            + 400;
        Self {
            name,
            topic,
            columns,
            key_columns,
            replica_identity,
            source_head: String::from_utf8(head).unwrap_or_default(),
            source_db: String::from_utf8(db).unwrap_or_default(),
            source_tail: String::from_utf8(tail).unwrap_or_default(),
            metrics,
            envelope_overhead,
            outbox: None,
            excluded: false,
            schemas: None,
            avro_source: super::avro::AvroSource::new(
                &identity.server_name,
                &identity.database,
                schema,
                table,
            ),
            avro: None,
        }
    }

    /// Sets the rendered schemas (`kafka.events.schemas_enable`); every record then carries
    /// them, which the in-flight estimate counts.
    pub fn set_schemas(&mut self, schemas: RenderedSchemas) {
        self.envelope_overhead +=
            schemas.value_head.len() + schemas.key_head.as_ref().map_or(0, |k| k.len());
        self.avro = super::avro::AvroLayout::new(self, &schemas);
        self.schemas = Some(schemas);
    }

    /// Renders the relation's schemas when its events need them (JSON with schemas, Avro) and,
    /// for Avro, registers them (one registration per schema and process: the registry
    /// client caches ids). `catalog` is [`super::schema::column_catalog`]'s answer.
    ///
    /// # Errors
    ///
    /// What the schema registry refused (e.g. a change its compatibility rule forbids), or a
    /// name Avro does not allow: the pipeline stops with the fix.
    pub async fn prepare_schemas(
        &mut self,
        catalog: &[super::schema::ColumnCatalog],
        events: &EventOptions,
        registry: Option<&crate::registry::Registry>,
    ) -> Result<(), crate::error::PipelineError> {
        let mut schemas = super::schema::render(self, catalog, events);
        schemas.registered =
            crate::registry::register_schemas(registry, &self.topic, &schemas, events, &self.name)
                .await?;
        self.set_schemas(schemas);
        Ok(())
    }

    /// Marks the columns the catalog says are `NOT NULL` (`catalog`: the relation's columns,
    /// by name).
    pub fn mark_not_null(&mut self, catalog: &[super::schema::ColumnCatalog]) {
        for column in &mut self.columns {
            column.not_null = catalog.iter().any(|c| c.name == column.name && c.not_null);
        }
    }

    /// Marks the columns whose type is `hstore` (`is_hstore` answers for a type OID).
    pub fn mark_hstore(&mut self, is_hstore: impl Fn(u32) -> bool) {
        for column in &mut self.columns {
            column.is_hstore = is_hstore(column.type_oid);
        }
    }

    /// The user-defined types (OIDs past PostgreSQL's own) of its columns, to look up in the
    /// catalog for [`RelationInfo::resolve_types`]; empty for a table of built-in types only.
    pub fn user_type_oids(&self) -> Vec<u32> {
        let mut oids: Vec<u32> = self
            .columns
            .iter()
            .map(|c| c.type_oid)
            .filter(|oid| *oid >= FIRST_USER_OID)
            .collect();
        oids.sort_unstable();
        oids.dedup();
        oids
    }

    /// Maps the columns of user-defined types as Debezium does: a domain as its base type, an
    /// enum's array element by element, a composite left out.
    pub fn resolve_types(&mut self, types: &std::collections::HashMap<u32, UserType>) {
        for column in &mut self.columns {
            match types.get(&column.type_oid) {
                Some(UserType::Domain { base, modifier }) => {
                    column.value_type = *base;
                    if column.type_modifier == -1 {
                        column.value_modifier = *modifier;
                    }
                    column.left_out = value::is_left_out(*base);
                }
                Some(UserType::EnumArray) => column.value_type = value::ENUM_ARRAY_OID,
                Some(UserType::Composite) => column.left_out = true,
                Some(UserType::Enum | UserType::Other) | None => {}
            }
        }
    }

    /// Applies the pipeline's table exclusions and column rules.
    pub fn apply_rules(&mut self, config: &super::config::PostgresSourceConfig) {
        self.excluded = config.excludes_table(&self.name);
        for column in &mut self.columns {
            column.treatment = config.column_treatment(&format!("{}.{}", self.name, column.name));
        }
    }
}

/// What happened to a row.
#[derive(Debug)]
pub enum ChangeKind {
    /// Insert.
    Insert {
        /// The new row.
        new: TupleData,
    },
    /// Update.
    Update {
        /// The old row ('O', REPLICA IDENTITY FULL) or old key ('K', when the key changed).
        old: Option<TupleData>,
        /// Whether `old` holds only key columns.
        old_is_key_only: bool,
        /// The new row.
        new: TupleData,
        /// Whether the key changed: then the update is written as delete + tombstone + create.
        key_changed: bool,
    },
    /// Delete.
    Delete {
        /// The old row or key.
        old: TupleData,
        /// Whether `old` holds only key columns.
        old_is_key_only: bool,
    },
    /// Truncate.
    Truncate,
    /// A row read by a snapshot (`op: "r"`).
    Read {
        /// The row.
        row: TupleData,
        /// `source.snapshot`: where the row is in the snapshot (`"incremental"` for an
        /// incremental snapshot's rows).
        marker: SnapshotMarker,
    },
}

/// One decoded row change with its position.
#[derive(Debug)]
pub struct RowChange {
    /// The table.
    pub relation: Arc<RelationInfo>,
    /// What happened.
    pub kind: ChangeKind,
    /// The LSN of the transaction's commit record.
    pub commit_lsn: Lsn,
    /// The change's own LSN.
    pub lsn: Lsn,
    /// Index of the change's first record within its transaction.
    pub tx_index: u32,
    /// Transaction id.
    pub xid: u32,
    /// Commit time, Unix microseconds.
    pub commit_unix_micros: i64,
    /// The end LSN of the last transaction the stream saw commit before this change (none yet
    /// since the start, or a snapshot's row): the first of Debezium's `source.sequence`.
    pub last_commit_end: Option<Lsn>,
    /// Bytes the change holds in flight, as charged to the budget.
    pub size_hint: usize,
    /// Debezium's `transaction` block (`provide_transaction_metadata`), of the change's first
    /// event; `None`: `"transaction":null`.
    pub transaction: Option<TransactionOrder>,
}

/// A logical decoding message written with `pg_logical_emit_message`.
#[derive(Debug)]
pub struct LogicalMessage {
    /// The message's topic.
    pub topic: Arc<str>,
    /// Prefix.
    pub prefix: String,
    /// Content.
    pub content: Bytes,
    /// Its LSN.
    pub lsn: Lsn,
    /// Commit LSN of its transaction (its own LSN when non-transactional).
    pub commit_lsn: Lsn,
    /// Index within the transaction.
    pub tx_index: u32,
    /// Transaction id, for transactional messages.
    pub xid: Option<u32>,
    /// Commit time (or receive time for non-transactional messages), Unix microseconds.
    pub commit_unix_micros: i64,
    /// As [`RowChange::last_commit_end`].
    pub last_commit_end: Option<Lsn>,
}

impl RowChange {
    /// How many Kafka records the change becomes.
    pub fn record_count(&self, tombstones: bool) -> u32 {
        let with_tombstone = 1 + u32::from(tombstones);
        match &self.kind {
            ChangeKind::Insert { .. } | ChangeKind::Truncate | ChangeKind::Read { .. } => 1,
            ChangeKind::Update {
                key_changed: true, ..
            } => with_tombstone + 1,
            ChangeKind::Update { .. } => 1,
            ChangeKind::Delete { .. } => with_tombstone,
        }
    }
}

/// Encoding choices fixed for a pipeline.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Follow deletes with a tombstone.
    pub tombstones: bool,
    /// `[kafka.events]`.
    pub events: EventOptions,
    /// Processing time for the envelope's `ts_ms`, `ts_us`, `ts_ns`, Unix nanoseconds.
    pub now_unix_nanos: i64,
}

/// Encodes a change into its records, in order (`out` gets `record_count` records).
pub fn encode_change(change: &RowChange, options: &EncodeOptions, out: &mut Vec<OutRecord>) {
    let rel = &change.relation;
    if let Some(outbox) = &rel.outbox {
        // Only inserts reach here (see the stream); a row without an aggregate type was
        // refused before admission.
        if let ChangeKind::Insert { new } = &change.kind {
            let headers = position_headers(change.commit_lsn, change.lsn, change.tx_index);
            out.extend(outbox.encode(new, headers));
        }
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
/// with empty `schema` and `table`.
pub fn encode_message(
    message: &LogicalMessage,
    identity: &SourceIdentity,
    now_unix_nanos: i64,
) -> OutRecord {
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
    value.extend_from_slice(b"},\"message\":{\"prefix\":");
    write_json_str(&mut value, &message.prefix);
    value.extend_from_slice(b",\"content\":\"");
    value.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(&message.content)
            .as_bytes(),
    );
    value.extend_from_slice(b"\"}}");
    OutRecord {
        partition: None,
        topic: Arc::clone(&message.topic),
        key: Some(key),
        value: Some(value),
        headers: position_headers(message.commit_lsn, message.lsn, message.tx_index),
    }
}

/// Debezium's `source.sequence`: a JSON string holding the JSON array of the last commit's
/// end LSN (`null` when none) and the change's LSN, both as strings.
fn write_sequence(last_commit_end: Option<Lsn>, lsn_digits: &[u8], out: &mut Vec<u8>) {
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
    let mut out = Vec::with_capacity(rel.envelope_overhead + 64 * rel.columns.len());
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

/// Writes a row object: every column, as Debezium does (an old key from the server, under
/// REPLICA IDENTITY DEFAULT, has its other columns null). Unchanged TOASTed values are taken
/// from `old` when it has them, otherwise Debezium's placeholder, or (with
/// `kafka.events.unavailable_columns`) left out and their column index pushed to
/// `unavailable`.
fn write_row(
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

/// What a row holds for one of its columns.
pub(super) enum Cell<'a> {
    /// Not a field of the row (excluded by a column rule, or left out as Debezium does).
    Skip,
    /// An unchanged TOASTed value the server did not send, left out
    /// (`kafka.events.unavailable_columns`).
    Unavailable,
    /// An unchanged TOASTed value the server did not send: Debezium's placeholder.
    Placeholder,
    /// A value (`None`: the tuple has no value for the column, as an old key's other columns).
    Value(Option<&'a Datum>),
}

/// The column `index` of `row`; unchanged TOASTed values are taken from `old` when it has them.
pub(super) fn cell<'a>(
    column: &ColumnInfo,
    index: usize,
    row: &'a TupleData,
    old: Option<&'a TupleData>,
    events: &EventOptions,
) -> Cell<'a> {
    if column.treatment == ColumnTreatment::Exclude || column.left_out {
        return Cell::Skip;
    }
    let datum = row.0.get(index);
    if matches!(datum, Some(Datum::UnchangedToast)) {
        return match old.and_then(|old| old.0.get(index)) {
            Some(previous @ (Datum::Text(_) | Datum::Binary(_) | Datum::Null)) => {
                Cell::Value(Some(previous))
            }
            _ if events.unavailable_columns => Cell::Unavailable,
            _ => Cell::Placeholder,
        };
    }
    Cell::Value(datum)
}

/// Appends a row's value as JSON, as the column's rule says (masked, hashed or as it is).
pub(super) fn write_cell(
    table: &str,
    column: &ColumnInfo,
    datum: Option<&Datum>,
    events: &EventOptions,
    streamed: bool,
    out: &mut Vec<u8>,
) {
    match (column.treatment, datum) {
        (ColumnTreatment::Mask, Some(Datum::Text(_) | Datum::Binary(_))) => {
            out.extend_from_slice(b"\"****\"");
        }
        (ColumnTreatment::Hash, Some(Datum::Text(value) | Datum::Binary(value))) => {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(value);
            out.push(b'"');
            for byte in digest {
                out.extend_from_slice(format!("{byte:02x}").as_bytes());
            }
            out.push(b'"');
        }
        _ => write_datum(table, column, datum, out, events, streamed),
    }
}

/// Counts a value sent as text (`write_datum`) and logs the first one of the process.
fn value_kept_as_text(table: &str, column: &ColumnInfo, error: &value::ValueError) {
    static LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let type_name = error.type_name();
    metrics::counter!(
        crate::runtime::metrics::VALUES_AS_TEXT,
        "table" => table.to_owned(),
        "type" => type_name
    )
    .increment(1);
    if !LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            table,
            column = %column.name,
            r#type = %type_name,
            error = %error,
            "a value did not parse as its type and was sent as a JSON string of its text; \
             sluice_source_values_as_text_total counts them (this is logged once)"
        );
    }
}

/// Appends one value; `streamed` says it comes from pgoutput (a change) rather than a
/// snapshot's query, which Debezium maps differently for a few types.
pub(super) fn write_datum(
    table: &str,
    column: &ColumnInfo,
    datum: Option<&Datum>,
    out: &mut Vec<u8>,
    events: &EventOptions,
    streamed: bool,
) {
    let start = out.len();
    write_nullable_datum(table, column, datum, out, events, streamed);
    if column.not_null && out[start..] == *b"null" {
        // Debezium's value for a NOT NULL column it has none for: its type's zero (issue 41).
        out.truncate(start);
        let written = if column.is_hstore {
            value::write_hstore(b"", out, events.hstore_handling_mode)
        } else {
            value::write_required_default(column.value_type, column.value_modifier, out, events)
        };
        if written.is_err() {
            out.truncate(start);
            out.extend_from_slice(b"null");
        }
    }
}

/// [`write_datum`] before a NOT NULL column's null is replaced.
fn write_nullable_datum(
    table: &str,
    column: &ColumnInfo,
    datum: Option<&Datum>,
    out: &mut Vec<u8>,
    events: &EventOptions,
    streamed: bool,
) {
    match datum {
        None | Some(Datum::Null) | Some(Datum::UnchangedToast) => out.extend_from_slice(b"null"),
        Some(Datum::Text(text)) => {
            let start = out.len();
            let (oid, modifier) = (column.value_type, column.value_modifier);
            let written = if column.is_hstore {
                value::write_hstore(text, out, events.hstore_handling_mode)
            } else if streamed {
                value::write_streamed_json(oid, modifier, text, out, events)
            } else {
                value::write_json(oid, modifier, text, out, events)
            };
            if let Err(error) = written {
                // The text did not parse as its type: keep it, as a string, rather than lose it,
                // and tell the operator (once per process in the log, always in the metric).
                out.truncate(start);
                write_json_str(out, &String::from_utf8_lossy(text));
                value_kept_as_text(table, column, &error);
            }
        }
        Some(Datum::Binary(bytes)) => {
            out.push(b'"');
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .as_bytes(),
            );
            out.push(b'"');
        }
    }
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

impl super::config::PostgresSourceConfig {
    /// The treatment of `schema.table.column`.
    pub fn column_treatment(&self, qualified_column: &str) -> ColumnTreatment {
        let rules = &self.columns;
        let any = |patterns: &[String]| {
            patterns
                .iter()
                .any(|p| crate::config::glob_matches(p, qualified_column))
        };
        if any(&rules.exclude) {
            ColumnTreatment::Exclude
        } else if any(&rules.hash) {
            ColumnTreatment::Hash
        } else if any(&rules.mask) {
            ColumnTreatment::Mask
        } else {
            ColumnTreatment::Keep
        }
    }
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
    use super::*;
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
        };
        let identity = SourceIdentity {
            server_name: "app".into(),
            database: "db".into(),
            registry: None,
        };
        let record = encode_message(&message, &identity, 5_000_000);
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
