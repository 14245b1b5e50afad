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
//!   itself; its changes before that are in the WAL under the root and are not lost. A
//!   detached table in a captured schema is a plain table from then on (and is captured as
//!   one, with `snapshot_new_tables`).
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

use super::setup::{CapturedTable, PgCatalog};
use crate::error::{PipelineError, classify_pg};

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

/// The condition that restricts a snapshot of a root to the rows of `leaves`.
pub fn rows_of(leaves: &[&Partition]) -> String {
    let oids: Vec<String> = leaves.iter().map(|p| p.oid.to_string()).collect();
    format!("tableoid IN ({})", oids.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

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
