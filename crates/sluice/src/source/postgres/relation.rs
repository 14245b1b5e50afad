//! A captured table as its last Relation message described it: columns, key, topic, the `source`
//! block's constant parts, and the schemas its events carry once rendered.

use super::avro::layout::{AvroLayout, AvroSource};
use super::column::{ColumnInfo, ColumnTreatment, FIRST_USER_OID};
pub use super::outbox::OutboxLayout;
use super::pgoutput::ReplicaIdentity;
use super::setup::UserType;
use super::value;
use crate::event::schema::RenderedSchemas;
use crate::event::write_json_str;
use crate::runtime::metrics::TableMetrics;
use std::sync::Arc;

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
    /// The table's schema and name, as the `source` block names them.
    pub(super) schema_name: String,
    pub(super) table_name: String,
    /// The `source` block up to `"ts_ms":`.
    pub(super) source_head: String,
    /// The `source` block from after `snapshot` up to `"sequence":`.
    pub(super) source_db: String,
    /// The `source` block from after `ts_ns` up to `"txId":`.
    pub(super) source_tail: String,
    /// Per-table counters.
    pub metrics: Arc<TableMetrics>,
    /// A rough per-change overhead of the JSON envelope, for the in-flight budget.
    pub envelope_overhead: usize,
    /// Set when the table is the pipeline's outbox: inserts become routed events.
    pub outbox: Option<Arc<OutboxLayout>>,
    /// Left out by `source.postgres.exclude_tables` (or a detached partition under
    /// `partitions = "root"`): its changes emit nothing.
    pub excluded: bool,
    /// `partitions = "leaves"`: the partitioned tables above this partition (`schema.table`
    /// each, nearest first), whose rules cover it.
    pub ancestors: Vec<String>,
    /// The key and envelope schemas (`kafka.events.schemas_enable`), rendered once.
    pub schemas: Option<RenderedSchemas>,
    /// The `source` block's constant parts as Avro.
    pub(super) avro_source: AvroSource,
    /// How events are written as Avro, once the schemas are registered.
    pub(super) avro: Option<AvroLayout>,
}

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
            schema_name: schema.to_owned(),
            table_name: table.to_owned(),
            source_head: String::from_utf8(head).unwrap_or_default(),
            source_db: String::from_utf8(db).unwrap_or_default(),
            source_tail: String::from_utf8(tail).unwrap_or_default(),
            metrics,
            envelope_overhead,
            outbox: None,
            excluded: false,
            ancestors: Vec::new(),
            schemas: None,
            avro_source: AvroSource::new(&identity.server_name, &identity.database, schema, table),
            avro: None,
        }
    }

    /// Sets the rendered schemas (`kafka.events.schemas_enable`); every record then carries
    /// them, which the in-flight estimate counts.
    pub fn set_schemas(&mut self, schemas: RenderedSchemas) {
        self.envelope_overhead +=
            schemas.value_head.len() + schemas.key_head.as_ref().map_or(0, |k| k.len());
        self.avro = AvroLayout::new(&self.columns, &self.key_columns, &schemas);
        self.schemas = Some(schemas);
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

    /// Applies the pipeline's table exclusions and column rules, by the table's name and
    /// those of the partitioned tables above it (`ancestors`, nearest first).
    pub fn apply_rules(
        &mut self,
        config: &super::config::PostgresSourceConfig,
        ancestors: Vec<String>,
    ) {
        self.ancestors = ancestors;
        let names = self.rule_names();
        self.excluded = config.excludes_any(&names);
        for column in &mut self.columns {
            column.treatment = config.column_treatment_of(&names, &column.name);
        }
    }

    /// The names the pipeline's rules are looked up by: `schema.table`, then the partitioned
    /// tables above it.
    pub fn rule_names(&self) -> Vec<String> {
        std::iter::once(self.name.clone())
            .chain(self.ancestors.iter().cloned())
            .collect()
    }
}
