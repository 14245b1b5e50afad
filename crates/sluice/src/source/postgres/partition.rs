//! Partitioned tables (`source.postgres.partitions`).
//!
//! Under `partitions = "root"` a partitioned table is one logical table: the publication
//! publishes via the partition root, so the stream names the root for a change of any
//! partition, and the initial snapshot reads the root once (every partition's rows, each row
//! once). What this module adds is the partitions that join while running:
//!
//! - a partition *created* as one (`CREATE TABLE … PARTITION OF`) held no row before it was
//!   a partition: every row it has was streamed under the root. Nothing is snapshotted.
//! - a table *attached* (`ALTER TABLE … ATTACH PARTITION`) brings rows that were never
//!   published under the root: they are snapshotted once, by an incremental snapshot of the
//!   root restricted to the attached leaves (`tableoid IN (…)`), which the DBLog windows keep
//!   consistent with the stream.
//! - a partition detached or dropped stops being published under the root by PostgreSQL
//!   itself; its changes before that are in the WAL under the root (decoding reads the
//!   catalog as it was) and are not lost. A detached table in a captured schema is a plain
//!   table from then on, which sluice would capture as a new one (a topic, a snapshot): it
//!   remembers instead which tables were partitions of a captured root ([`detached`]) and
//!   leaves them out, also when they were detached while it was stopped, unless `tables`
//!   names them. Its changes published under its own name after the detach are dropped.
//!
//! The two first cases are told apart by the catalog: a partition created as one got its
//! `pg_inherits` row in the transaction that created its row type; an attached table's type
//! is older than its `pg_inherits` row. A link anywhere between the leaf and the root that
//! was attached makes the leaf attached (a sub-partitioned table attached with its
//! partitions). When in doubt (no row type), a leaf counts as attached: a row snapshotted
//! twice is a duplicate, a row never snapshotted would be lost.
//!
//! The leaves known are kept with the incremental snapshots' state, so that a partition
//! attached while sluice was stopped is found at the next start.
//!
//! Under `partitions = "leaves"` each partition is a table; rules that name a partitioned
//! table cover the partitions under it (their [`CapturedTable::rule_names`]). A partition
//! created while sluice was stopped joins without a snapshot only when the catalog and the
//! last start's transaction snapshot prove every row of it was streamed ([`Creation`]).

use std::collections::BTreeMap;

use super::config::{PartitionMode, PgPipelineConfig};
use super::setup::{CapturedTable, PgCatalog};
use crate::error::{PipelineError, classify_pg};
use crate::source::incremental::IncrementalState;

/// A leaf partition of a captured partitioned table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// The leaf, `schema.table`.
    pub leaf: String,
    /// Its OID (for the snapshot's `tableoid` condition).
    pub oid: u32,
    /// The captured partitioned table at the top of its tree, `schema.table`.
    pub root: String,
    /// Whether it, or a table between it and the root, was attached rather than created as a
    /// partition (see the module docs).
    pub attached: bool,
}

/// The leaves of the partitioned tables among `tables`, by root then leaf.
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn leaves(
    catalog: &PgCatalog,
    tables: &[CapturedTable],
) -> Result<Vec<Partition>, PipelineError> {
    let roots: Vec<String> = tables.iter().map(CapturedTable::qualified).collect();
    if roots.is_empty() {
        return Ok(Vec::new());
    }
    let rows = catalog
        .client()
        .query(
            "SELECT format('%s.%s', n.nspname, c.relname), c.oid::int8, \
                    format('%s.%s', rn.nspname, r.relname), \
                    EXISTS (SELECT 1 FROM pg_partition_ancestors(c.oid) a \
                            JOIN pg_inherits i ON i.inhrelid = a.relid \
                            JOIN pg_class ac ON ac.oid = a.relid \
                            LEFT JOIN pg_type ty ON ty.oid = ac.reltype \
                            WHERE ty.oid IS NULL OR NOT (i.xmin = ty.xmin)) \
             FROM pg_class r JOIN pg_namespace rn ON rn.oid = r.relnamespace \
             CROSS JOIN LATERAL pg_partition_tree(r.oid) t \
             JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE r.relkind = 'p' AND NOT r.relispartition AND t.isleaf \
               AND format('%s.%s', rn.nspname, r.relname) = ANY($1::text[]) \
             ORDER BY 3, 1",
            &[&roots],
        )
        .await
        .map_err(|e| classify_pg("cannot list the partitions of the captured tables", e))?;
    Ok(rows
        .iter()
        .map(|row| Partition {
            leaf: row.get(0),
            oid: u32::try_from(row.get::<_, i64>(1)).unwrap_or_default(),
            root: row.get(2),
            attached: row.get(3),
        })
        .collect())
}

/// Whether any of `tables` is a partitioned table or a partition.
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn any_partitioned(
    catalog: &PgCatalog,
    tables: &[CapturedTable],
) -> Result<bool, PipelineError> {
    let names: Vec<String> = tables.iter().map(CapturedTable::qualified).collect();
    let row = catalog
        .client()
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE (c.relkind = 'p' OR c.relispartition) \
                   AND format('%s.%s', n.nspname, c.relname) = ANY($1::text[]))",
            &[&names],
        )
        .await
        .map_err(|e| classify_pg("cannot read the captured tables", e))?;
    Ok(row.get(0))
}

/// `partitions = "leaves"`: whether every row of the partition `schema.table` was streamed:
/// it was created as a partition (not attached; see the module docs), in a schema publication
/// `publication` publishes whole (or `FOR ALL TABLES`), so it was published from its first
/// row. Such a partition joins the captured set without a snapshot.
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn streamed_since_creation(
    catalog: &PgCatalog,
    publication: &str,
    schema: &str,
    table: &str,
) -> Result<bool, PipelineError> {
    // Schema publications (pg_publication_namespace) came with PostgreSQL 15.
    let whole_schema = if catalog.server_major_version().await? >= 15 {
        "EXISTS (SELECT 1 FROM pg_publication_namespace pn \
             WHERE pn.pnpubid = p.oid AND pn.pnnspid = n.oid)"
    } else {
        "false"
    };
    let sql = format!(
        "SELECT NOT EXISTS (SELECT 1 FROM pg_partition_ancestors(c.oid) a \
                    JOIN pg_inherits i ON i.inhrelid = a.relid \
                    JOIN pg_class ac ON ac.oid = a.relid \
                    LEFT JOIN pg_type ty ON ty.oid = ac.reltype \
                    WHERE ty.oid IS NULL OR NOT (i.xmin = ty.xmin)) \
                AND (p.puballtables OR {whole_schema}) \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_publication p ON p.pubname = $1 \
         WHERE n.nspname = $2 AND c.relname = $3 AND c.relispartition"
    );
    let row = catalog
        .client()
        .query_opt(&sql, &[&publication, &schema, &table])
        .await
        .map_err(|e| classify_pg("cannot read a new partition", e))?;
    Ok(row.is_some_and(|row| row.get(0)))
}

/// `partitions = "root"`: the tables among `tables` (captured by schema now, each with its
/// OID) that were partitions of a captured partitioned table and were detached from it, by
/// `schema.table`, with their OIDs: those `state` remembers as detached, and those new to the
/// captured set that `state` knew as leaves (by name, and by OID when it recorded one), or
/// whose leaves (`current`, listed under the captured roots including `tables`) it knew — a
/// detached sub-partitioned partition. A table `named` (the pipeline's `tables`) is never
/// left out: it is captured as a table of its own.
pub fn detached(
    state: Option<&IncrementalState>,
    tables: &[CapturedTable],
    current: &[Partition],
    named: &[String],
) -> BTreeMap<String, u32> {
    let Some(state) = state else {
        return BTreeMap::new();
    };
    let known_leaves = state.known_partitions.as_ref();
    let was_leaf = |name: &str, oid: u32| {
        known_leaves.is_some_and(|leaves| leaves.contains(name))
            && state
                .partition_oids
                .get(name)
                .is_none_or(|&known| known == oid)
    };
    tables
        .iter()
        .filter(|t| !named.contains(&t.qualified()))
        .filter(|t| {
            let name = t.qualified();
            if state.detached_partitions.get(&name) == Some(&t.oid) {
                return true;
            }
            let new = state
                .known_tables
                .as_ref()
                .is_some_and(|known| !known.contains(&name));
            new && (was_leaf(&name, t.oid)
                || current
                    .iter()
                    .any(|p| p.root == name && was_leaf(&p.leaf, p.oid)))
        })
        .map(|t| (t.qualified(), t.oid))
        .collect()
}

/// `partitions = "leaves"`: how a partition new to the captured set came to be, for one created
/// while sluice was stopped. Every row of it was streamed — it needs no snapshot — when it was
/// created as a partition (not attached, renamed or moved: see the module docs), in a schema
/// the publication publishes whole (or `FOR ALL TABLES`), by a transaction that started after
/// a point where the slot existed and that publication's membership row was committed (the
/// last start's [`crate::source::incremental::StartHorizon`], under the same capture
/// settings): every change it ever had is then in the slot's WAL since that point, decoded
/// under that publication, and was delivered by an earlier run or is decoded by this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creation {
    /// The transaction that created it (its row type's `xmin`, which is its `pg_inherits`
    /// row's).
    pub xid: u32,
    /// The transaction that made the publication publish its schema whole (the
    /// `pg_publication_namespace` row's `xmin`), or, `FOR ALL TABLES`, created the
    /// publication (its row's `xmin`).
    pub published_by: u32,
}

/// `partitions = "leaves"`: the [`Creation`] of the partition `schema.table` when it was
/// created as one in a schema `publication` publishes whole (as
/// [`streamed_since_creation`]); `None` otherwise.
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn creation(
    catalog: &PgCatalog,
    publication: &str,
    schema: &str,
    table: &str,
) -> Result<Option<Creation>, PipelineError> {
    // Schema publications (pg_publication_namespace) came with PostgreSQL 15.
    let membership = if catalog.server_major_version().await? >= 15 {
        "(SELECT pn.xmin::text::int8 FROM pg_publication_namespace pn \
             WHERE pn.pnpubid = p.oid AND pn.pnnspid = n.oid)"
    } else {
        "NULL::int8"
    };
    let sql = format!(
        "SELECT ty.xmin::text::int8, \
                CASE WHEN p.puballtables THEN p.xmin::text::int8 ELSE {membership} END \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_type ty ON ty.oid = c.reltype \
         JOIN pg_publication p ON p.pubname = $1 \
         WHERE n.nspname = $2 AND c.relname = $3 AND c.relispartition \
           AND NOT EXISTS (SELECT 1 FROM pg_partition_ancestors(c.oid) a \
                    JOIN pg_inherits i ON i.inhrelid = a.relid \
                    JOIN pg_class ac ON ac.oid = a.relid \
                    LEFT JOIN pg_type aty ON aty.oid = ac.reltype \
                    WHERE aty.oid IS NULL OR NOT (i.xmin = aty.xmin))"
    );
    let row = catalog
        .client()
        .query_opt(&sql, &[&publication, &schema, &table])
        .await
        .map_err(|e| classify_pg("cannot read how a new partition was created", e))?;
    let xid = |value: Option<i64>| value.and_then(|v| u32::try_from(v).ok());
    Ok(row.and_then(|row| {
        Some(Creation {
            xid: xid(row.get(0))?,
            published_by: xid(row.get(1))?,
        })
    }))
}

/// The capture settings a [`crate::source::incremental::StartHorizon`] holds under: which
/// tables are published and captured, which rows, and as what.
pub fn capture_settings(config: &PgPipelineConfig, mode: PartitionMode) -> String {
    let pg = &config.source;
    serde_json::json!({
        "publication": config.publication_name(),
        "schemas": pg.schemas,
        "tables": pg.tables,
        "exclude_tables": pg.exclude_tables,
        "row_filters": pg.row_filters,
        "partitions": mode.as_str(),
    })
    .to_string()
}

/// The condition that restricts a snapshot of a root to the rows of `leaves`.
pub fn rows_of(leaves: &[&Partition]) -> String {
    let oids: Vec<String> = leaves.iter().map(|p| p.oid.to_string()).collect();
    format!("tableoid IN ({})", oids.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, oid: u32) -> CapturedTable {
        let (schema, table) = name.split_once('.').unwrap();
        CapturedTable {
            schema: schema.into(),
            table: table.into(),
            replica_identity: 'd',
            has_primary_key: true,
            ancestors: Vec::new(),
            oid,
        }
    }

    fn leaf(name: &str, oid: u32, root: &str) -> Partition {
        Partition {
            leaf: name.into(),
            oid,
            root: root.into(),
            attached: false,
        }
    }

    /// A state that knew `public.events` with leaves `events_01` (OID 11), `events_02` (12)
    /// and the sub-partitioned `events_03`'s `events_03_a` (13).
    fn known() -> IncrementalState {
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        IncrementalState {
            known_tables: Some(names(&["public.events", "public.plain"])),
            known_partitions: Some(names(&[
                "public.events_01",
                "public.events_02",
                "public.events_03_a",
            ])),
            partition_oids: [
                ("public.events_01".to_owned(), 11),
                ("public.events_02".to_owned(), 12),
                ("public.events_03_a".to_owned(), 13),
            ]
            .into(),
            ..IncrementalState::default()
        }
    }

    #[test]
    fn a_detached_partition_is_left_out_unless_named() {
        let state = known();
        // events_02 detached, events_03 (with its leaf) detached, a new plain table.
        let tables = [
            table("public.events", 10),
            table("public.plain", 20),
            table("public.events_02", 12),
            table("public.events_03", 30),
            table("public.new", 40),
        ];
        let current = [
            leaf("public.events_01", 11, "public.events"),
            leaf("public.events_03_a", 13, "public.events_03"),
        ];
        let left_out = detached(Some(&state), &tables, &current, &[]);
        assert_eq!(
            left_out,
            BTreeMap::from([
                ("public.events_02".to_owned(), 12),
                ("public.events_03".to_owned(), 30),
            ])
        );
        // Named in `tables`: captured as a table of its own.
        let named = ["public.events_02".to_owned()];
        let left_out = detached(Some(&state), &tables, &current, &named);
        assert!(!left_out.contains_key("public.events_02"), "{left_out:?}");
        // The first run knows nothing.
        assert!(detached(None, &tables, &current, &[]).is_empty());
    }

    #[test]
    fn a_table_recreated_under_a_detached_partitions_name_is_a_new_table() {
        let mut state = known();
        let tables = [table("public.events_02", 99)];
        assert!(detached(Some(&state), &tables, &[], &[]).is_empty());
        // Remembered as detached (a later run, once it joined the known tables' list or not).
        state.detached_partitions = [("public.events_02".to_owned(), 12)].into();
        assert!(detached(Some(&state), &tables, &[], &[]).is_empty());
        let same = [table("public.events_02", 12)];
        assert_eq!(detached(Some(&state), &same, &[], &[]).len(), 1);
        // A state written before OIDs were recorded goes by the name.
        let mut older = known();
        older.partition_oids.clear();
        assert_eq!(detached(Some(&older), &tables, &[], &[]).len(), 1);
    }

    #[test]
    fn a_snapshot_of_attached_leaves_reads_their_rows_only() {
        let leaf = |name: &str, oid| Partition {
            leaf: name.into(),
            oid,
            root: "public.events".into(),
            attached: true,
        };
        let (a, b) = (
            leaf("public.events_01", 16_400),
            leaf("public.events_02", 16_410),
        );
        assert_eq!(rows_of(&[&a, &b]), "tableoid IN (16400, 16410)");
    }
}
