//! The publication: which tables, rows and columns the server decodes for the pipeline.
//!
//! Without filters the publication is what it always was: `FOR TABLES IN SCHEMA` for the
//! captured schemas plus the tables listed by name (`FOR TABLE …` on servers before 15). With
//! `source.postgres.row_filters` or `columns.exclude` the filters are pushed down (PostgreSQL 15
//! or later), so that filtered rows and excluded columns never leave the server:
//!
//! - a row filter becomes `TABLE t WHERE (…)`. PostgreSQL ignores the row filter of a table
//!   whose schema is published whole, so the schemas holding a filtered table are expanded to
//!   their tables; the other schemas stay `TABLES IN SCHEMA`.
//! - an excluded column is left out of the table's column list (`TABLE t (a, b)`); the
//!   replica-identity columns always stay in it (PostgreSQL refuses updates and deletes
//!   otherwise), and a table with `REPLICA IDENTITY FULL` keeps every column (sluice still drops
//!   the excluded ones). Column lists cannot be combined with `TABLES IN SCHEMA`, so with any
//!   column list every captured table is listed by name (excluded tables are then not
//!   published at all).
//!
//! A publication sluice manages (`create_publication = true`) is kept in step with the pipeline
//! file at every start: the new definition is applied in a transaction that also checks that
//! PostgreSQL still accepts updates and deletes on every filtered table (a row filter may only
//! use replica-identity columns), and the log says what changed. On servers before 15 row
//! filters are refused (sluice cannot evaluate SQL conditions itself) and column exclusion
//! stays client-side.

use tokio_postgres::error::SqlState;

use super::config::{PartitionMode, PgPipelineConfig};
use super::setup::{CapturedTable, PgCatalog, quote_ident};
use crate::error::{PipelineError, classify_pg};
use crate::source::postgres::encode::ColumnTreatment;

/// The publication's definition as the pipeline file asks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicationPlan {
    /// Schemas published whole (`TABLES IN SCHEMA`).
    pub schemas: Vec<String>,
    /// Tables published by name, those without filters first.
    pub tables: Vec<PublishedTable>,
    /// Excluded columns that stay in the publication (sluice drops them), with the reason.
    pub client_side: Vec<ClientSideColumns>,
    /// `publish_via_partition_root`, on servers that have it (13 or later): `true` under
    /// `partitions = "root"`.
    pub via_root: Option<bool>,
    /// `publish_generated_columns = stored`, on servers that have it (18 or later): see
    /// [`super::generated`].
    pub generated: Option<bool>,
}

/// A table published by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedTable {
    /// Schema.
    pub schema: String,
    /// Table.
    pub table: String,
    /// The column list (`None`: every column).
    pub columns: Option<Vec<String>>,
    /// The columns the column list leaves out.
    pub left_out: Vec<String>,
    /// The row filter.
    pub filter: Option<String>,
}

/// Excluded columns of a table that the publication still carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSideColumns {
    /// `schema.table`.
    pub table: String,
    /// The excluded columns.
    pub columns: Vec<String>,
    /// Why they are not left out of the publication.
    pub reason: String,
}

impl PublishedTable {
    fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// Whether it carries a filter (row filter or column list).
    pub fn is_filtered(&self) -> bool {
        self.columns.is_some() || self.filter.is_some()
    }

    /// `TABLE "s"."t" ("a", "b") WHERE (…)`.
    fn sql(&self) -> String {
        let mut sql = format!(
            "TABLE {}.{}",
            quote_ident(&self.schema),
            quote_ident(&self.table)
        );
        if let Some(columns) = &self.columns {
            let columns: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
            sql.push_str(&format!(" ({})", columns.join(", ")));
        }
        if let Some(filter) = &self.filter {
            sql.push_str(&format!(" WHERE ({filter})"));
        }
        sql
    }

    /// The pipeline file's key behind this table's filters, for messages.
    fn config_key(&self) -> String {
        if self.filter.is_some() {
            format!("source.postgres.row_filters.{:?}", self.qualified())
        } else {
            "source.postgres.columns.exclude".to_owned()
        }
    }
}

impl PublicationPlan {
    /// The definition for `tables` (the captured ones) on a server of major `version`.
    ///
    /// # Errors
    ///
    /// Fatal when row filters are configured and the server is older than 15; retryable on
    /// connection trouble.
    pub async fn build(
        catalog: &PgCatalog,
        config: &PgPipelineConfig,
        tables: &[CapturedTable],
        version: u32,
    ) -> Result<Self, PipelineError> {
        let pg = &config.source;
        let outbox = pg.outbox.as_ref().map(|o| o.table.as_str());
        let mode = PartitionMode::resolve(pg.partitions, version)
            .map_err(|(problem, fix)| PipelineError::fatal(problem, fix))?;
        let mut plan = Self {
            via_root: (version >= 13).then_some(mode == PartitionMode::Root),
            generated: super::generated::wanted(config, version)?,
            ..Self::default()
        };
        if version < 15
            && let Some(table) = pg.row_filters.keys().next()
        {
            return Err(PipelineError::fatal(
                format!(
                    "source.postgres.row_filters.{table:?}: row filters need PostgreSQL 15 or later (the server is {version})"
                ),
                "remove source.postgres.row_filters (sluice does not evaluate SQL conditions itself), or upgrade PostgreSQL",
            ));
        }
        let mut listed = Vec::with_capacity(tables.len());
        for captured in tables {
            let qualified = captured.qualified();
            let mut table = PublishedTable {
                schema: captured.schema.clone(),
                table: captured.table.clone(),
                columns: None,
                left_out: Vec::new(),
                filter: pg.row_filter_of(&captured.rule_names()),
            };
            let columns = if pg.columns.exclude.is_empty() {
                Vec::new()
            } else {
                table_columns(
                    catalog,
                    &captured.schema,
                    &captured.table,
                    plan.generated == Some(true),
                )
                .await?
            };
            let excluded: Vec<String> = columns
                .iter()
                .filter(|c| {
                    pg.column_treatment_of(&captured.rule_names(), &c.name)
                        == ColumnTreatment::Exclude
                })
                .map(|c| c.name.clone())
                .collect();
            if !excluded.is_empty() {
                let reason = if version < 15 {
                    Some(format!(
                        "PostgreSQL {version} has no publication column lists (15 or later)"
                    ))
                } else if !pg.publication_column_lists {
                    Some("source.postgres.publication_column_lists = false".to_owned())
                } else if outbox == Some(qualified.as_str()) {
                    Some("the outbox table is published whole".to_owned())
                } else if captured.replica_identity == 'f' {
                    Some(
                        "REPLICA IDENTITY FULL: the column list would have to hold every column"
                            .to_owned(),
                    )
                } else {
                    None
                };
                let kept: Vec<String> = columns
                    .iter()
                    .filter(|c| c.identity || !excluded.contains(&c.name))
                    .map(|c| c.name.clone())
                    .collect();
                let left_out: Vec<String> = columns
                    .iter()
                    .filter(|c| !kept.contains(&c.name))
                    .map(|c| c.name.clone())
                    .collect();
                let kept_identity: Vec<String> = excluded
                    .iter()
                    .filter(|name| kept.contains(name))
                    .cloned()
                    .collect();
                match reason {
                    Some(reason) => plan.client_side.push(ClientSideColumns {
                        table: qualified.clone(),
                        columns: excluded,
                        reason,
                    }),
                    None if kept.is_empty() => plan.client_side.push(ClientSideColumns {
                        table: qualified.clone(),
                        columns: excluded,
                        reason: "every column is excluded (a column list needs one)".to_owned(),
                    }),
                    None => {
                        if !kept_identity.is_empty() {
                            plan.client_side.push(ClientSideColumns {
                                table: qualified.clone(),
                                columns: kept_identity,
                                reason: "replica-identity columns stay in the publication"
                                    .to_owned(),
                            });
                        }
                        if !left_out.is_empty() {
                            table.columns = Some(kept);
                            table.left_out = left_out;
                        }
                    }
                }
            }
            listed.push(table);
        }
        let any_column_list = listed.iter().any(|t| t.columns.is_some());
        let expanded: Vec<&str> = if any_column_list {
            pg.schemas.iter().map(String::as_str).collect()
        } else {
            listed
                .iter()
                .filter(|t| t.filter.is_some())
                .map(|t| t.schema.as_str())
                .collect()
        };
        if version >= 15 {
            plan.schemas = pg
                .schemas
                .iter()
                .filter(|s| !expanded.contains(&s.as_str()))
                .cloned()
                .collect();
        }
        let mut published: Vec<PublishedTable> = listed
            .into_iter()
            .filter(|t| !plan.schemas.contains(&t.schema))
            .collect();
        // Tables without filters first: the statements that add a filtered table are then one
        // per table, so a refusal names its table.
        published.sort_by_key(PublishedTable::is_filtered);
        plan.tables = published;
        Ok(plan)
    }

    /// Whether anything is pushed down (a row filter or a column list).
    pub fn pushes_down(&self) -> bool {
        self.tables.iter().any(PublishedTable::is_filtered)
    }

    /// The published table `schema.table`, when published by name.
    pub fn table(&self, qualified: &str) -> Option<&PublishedTable> {
        self.tables.iter().find(|t| t.qualified() == qualified)
    }

    /// The publication objects without filters (schemas, then plain tables).
    fn plain_objects(&self) -> Vec<String> {
        let mut objects = Vec::new();
        if !self.schemas.is_empty() {
            let schemas: Vec<String> = self.schemas.iter().map(|s| quote_ident(s)).collect();
            objects.push(format!("TABLES IN SCHEMA {}", schemas.join(", ")));
        }
        // `TABLE a, b`: PostgreSQL 14 has no `TABLE a, TABLE b` (15 accepts both).
        let plain: Vec<String> = self
            .tables
            .iter()
            .filter(|t| !t.is_filtered())
            .map(|t| t.sql().trim_start_matches("TABLE ").to_owned())
            .collect();
        if !plain.is_empty() {
            objects.push(format!("TABLE {}", plain.join(", ")));
        }
        objects
    }

    /// The statements that make publication `name` this definition, each with the filtered
    /// table it adds (for messages): `CREATE PUBLICATION` (or `ALTER … SET`) with every table
    /// without filters, then one `ALTER … ADD TABLE` per filtered table.
    fn statements(&self, name: &str, create: bool) -> Vec<(String, Option<&PublishedTable>)> {
        let mut filtered = self.tables.iter().filter(|t| t.is_filtered());
        let mut first = self.plain_objects();
        let mut first_table = None;
        if first.is_empty()
            && let Some(table) = filtered.next()
        {
            first.push(table.sql());
            first_table = Some(table);
        }
        let name = quote_ident(name);
        let mut options = Vec::new();
        if self.via_root == Some(true) {
            options.push("publish_via_partition_root = true".to_owned());
        }
        if self.generated == Some(true) {
            options.push(format!(
                "publish_generated_columns = {}",
                super::generated::option_value(true)
            ));
        }
        let via_root = if options.is_empty() {
            String::new()
        } else {
            format!(" WITH ({})", options.join(", "))
        };
        let mut statements = vec![(
            if create {
                format!(
                    "CREATE PUBLICATION {name} FOR {}{via_root}",
                    first.join(", ")
                )
            } else {
                format!("ALTER PUBLICATION {name} SET {}", first.join(", "))
            },
            first_table,
        )];
        statements.extend(
            filtered.map(|t| (format!("ALTER PUBLICATION {name} ADD {}", t.sql()), Some(t))),
        );
        statements
    }

    /// The SQL that gives publication `name` this definition (for hints).
    pub fn alter_sql(&self, name: &str) -> String {
        let mut statements: Vec<String> = self
            .statements(name, false)
            .into_iter()
            .map(|(sql, _)| sql)
            .collect();
        if let Some(via_root) = self.via_root {
            statements.push(via_root_sql(name, via_root));
        }
        if let Some(generated) = self.generated {
            statements.push(super::generated::alter_sql(name, generated));
        }
        statements.join("; ")
    }

    /// The statements that create publication `name` with this plan, `; `-separated (for
    /// messages that tell the operator what to run).
    pub fn create_sql(&self, name: &str) -> String {
        self.statements(name, true)
            .into_iter()
            .map(|(sql, _)| sql)
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn log_client_side(&self) {
        for columns in &self.client_side {
            tracing::info!(
                table = %columns.table,
                columns = ?columns.columns,
                reason = %columns.reason,
                "excluded columns are not left out of the publication; sluice drops them"
            );
        }
    }
}

/// A column as the publication sees it.
struct TableColumn {
    name: String,
    /// Part of the replica identity (the primary key, or the `REPLICA IDENTITY USING INDEX`).
    identity: bool,
}

/// The table's columns that can be published (not dropped; not generated, unless `generated`
/// and stored), in order.
async fn table_columns(
    catalog: &PgCatalog,
    schema: &str,
    table: &str,
    generated: bool,
) -> Result<Vec<TableColumn>, PipelineError> {
    let rows = catalog
        .client()
        .query(
            "SELECT a.attname::text, EXISTS (SELECT 1 FROM pg_index i \
                 WHERE i.indrelid = c.oid AND a.attnum = ANY(i.indkey) \
                   AND CASE c.relreplident WHEN 'd' THEN i.indisprimary \
                                           WHEN 'i' THEN i.indisreplident ELSE false END) \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
               AND (a.attgenerated = '' OR ($3 AND a.attgenerated = 's')) \
             ORDER BY a.attnum",
            &[&schema, &table, &generated],
        )
        .await
        .map_err(|e| classify_pg("cannot read a table's columns", e))?;
    Ok(rows
        .iter()
        .map(|row| TableColumn {
            name: row.get(0),
            identity: row.get(1),
        })
        .collect())
}

/// Creates the publication when absent (and allowed), keeps a managed one in step with the
/// pipeline file, and checks an unmanaged one applies the configured row filters.
///
/// # Errors
///
/// Fatal when the publication is missing and may not be created, PostgreSQL refuses a filter,
/// or an unmanaged publication lacks a configured row filter; retryable on connection trouble.
pub async fn ensure(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
    tables: &[CapturedTable],
    place: Place,
) -> Result<PublicationPlan, PipelineError> {
    let name = config.publication_name();
    let exists = catalog
        .client()
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
        .await
        .map_err(|e| classify_pg("cannot read publications", e))?
        .is_some();
    let version = catalog.server_major_version().await?;
    let plan = PublicationPlan::build(catalog, config, tables, version).await?;
    plan.log_client_side();
    // A standby cannot write: there the publication is only checked, never created or changed.
    let managed = config.source.create_publication && place == Place::Server;
    if !exists {
        if place == Place::Standby {
            return Err(PipelineError::fatal(
                format!(
                    "publication {name:?} does not exist on the standby (source.postgres.url), and a standby cannot create one"
                ),
                format!(
                    "create it on the primary ({}), it reaches the standby by replication; or set source.postgres.primary_url so that sluice creates it there",
                    plan.create_sql(&name)
                ),
            ));
        }
        if !managed {
            return Err(PipelineError::fatal(
                format!("publication {name:?} does not exist"),
                format!(
                    "create it ({}) or set source.postgres.create_publication = true",
                    plan.create_sql(&name)
                ),
            ));
        }
        if plan.schemas.is_empty() && plan.tables.is_empty() {
            return Err(PipelineError::fatal(
                "no table to capture: the configured schemas hold no tables",
                "create the tables first, or list them in source.postgres.tables",
            ));
        }
        apply(catalog, &name, &plan, true).await?;
        return Ok(plan);
    }
    check_via_root(catalog, config, &name, &plan, tables).await?;
    super::generated::keep_in_step(catalog, config, &name, plan.generated).await?;
    if version < 15 {
        return Ok(plan);
    }
    if managed {
        if plan.pushes_down() || has_filters(catalog, &name).await? {
            if plan.schemas.is_empty() && plan.tables.is_empty() {
                return Err(PipelineError::fatal(
                    "no table to capture: the configured schemas hold no tables",
                    "create the tables first, or list them in source.postgres.tables",
                ));
            }
            apply(catalog, &name, &plan, false).await?;
        }
        return Ok(plan);
    }
    // Not ours to change: every configured row filter must be there (the snapshot applies it,
    // so the stream must too).
    let filtered: Vec<(String, Option<String>)> = catalog
        .client()
        .query(
            "SELECT schemaname || '.' || tablename, rowfilter FROM pg_publication_tables \
             WHERE pubname = $1",
            &[&name],
        )
        .await
        .map_err(|e| classify_pg("cannot read the publication's tables", e))?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    for table in plan.tables.iter().filter(|t| t.filter.is_some()) {
        let qualified = table.qualified();
        let applied = filtered
            .iter()
            .any(|(t, filter)| *t == qualified && filter.is_some());
        if !applied {
            return Err(PipelineError::fatal(
                format!(
                    "publication {name:?} does not filter {qualified} as {} asks (and create_publication = false)",
                    table.config_key()
                ),
                format!(
                    "run: {}; or set source.postgres.create_publication = true",
                    plan.alter_sql(&name)
                ),
            ));
        }
    }
    Ok(plan)
}

/// `ALTER PUBLICATION … SET (publish_via_partition_root = …)`.
fn via_root_sql(name: &str, via_root: bool) -> String {
    format!(
        "ALTER PUBLICATION {} SET (publish_via_partition_root = {via_root})",
        quote_ident(name)
    )
}

/// An existing publication's `publish_via_partition_root` against the plan's: a publication
/// sluice manages is set to it (logged); one it does not manage is reported, not changed,
/// when a captured table is partitioned or a partition (otherwise the setting changes
/// nothing).
async fn check_via_root(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
    name: &str,
    plan: &PublicationPlan,
    tables: &[CapturedTable],
) -> Result<(), PipelineError> {
    let Some(want) = plan.via_root else {
        return Ok(());
    };
    let now: bool = catalog
        .client()
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await
        .map_err(|e| classify_pg("cannot read the publication", e))?
        .get(0);
    if now == want {
        return Ok(());
    }
    let mode = if want { "root" } else { "leaves" };
    if !config.source.create_publication
        && !super::partition::any_partitioned(catalog, tables).await?
    {
        // Nothing captured is partitioned: the setting changes nothing (yet).
        return Ok(());
    }
    if !config.source.create_publication {
        return Err(PipelineError::fatal(
            format!(
                "publication {name:?} has publish_via_partition_root = {now}, but source.postgres.partitions = \"{mode}\" needs {want} (and create_publication = false): {}",
                if want {
                    "partitions' changes would be published under the partitions' names, not the root's"
                } else {
                    "partitions' changes would be published under their root's name, not the partitions'"
                }
            ),
            format!(
                "run: {}; or set source.postgres.partitions = \"{}\"",
                via_root_sql(name, want),
                if want { "leaves" } else { "root" }
            ),
        ));
    }
    catalog
        .client()
        .batch_execute(&via_root_sql(name, want))
        .await
        .map_err(|e| classify_pg(format!("cannot update publication {name:?}"), e))?;
    tracing::warn!(
        publication = %name,
        publish_via_partition_root = want,
        partitions = mode,
        "updated publication to match source.postgres.partitions (changes already in the WAL keep the old setting, and partitioned tables' topics change)"
    );
    Ok(())
}

/// Whether the publication has row filters or column lists.
async fn has_filters(catalog: &PgCatalog, name: &str) -> Result<bool, PipelineError> {
    let row = catalog
        .client()
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_publication_rel r \
                 JOIN pg_publication p ON p.oid = r.prpubid \
                 WHERE p.pubname = $1 AND (r.prqual IS NOT NULL OR r.prattrs IS NOT NULL))",
            &[&name],
        )
        .await
        .map_err(|e| classify_pg("cannot read the publication's tables", e))?;
    Ok(row.get(0))
}

/// The publication's definition as lines (schemas, tables named, and every published table
/// with its columns and row filter), sorted: two definitions are equal when these are.
async fn describe(catalog: &PgCatalog, name: &str) -> Result<Vec<String>, PipelineError> {
    // Schema publications, column lists and row filters came with PostgreSQL 15.
    let sql = if catalog.server_major_version().await? >= 15 {
        "SELECT 'schema ' || n.nspname FROM pg_publication_namespace pn \
             JOIN pg_namespace n ON n.oid = pn.pnnspid \
             JOIN pg_publication p ON p.oid = pn.pnpubid WHERE p.pubname = $1 \
         UNION ALL \
         SELECT format('table %s.%s named', n.nspname, c.relname) FROM pg_publication_rel r \
             JOIN pg_publication p ON p.oid = r.prpubid JOIN pg_class c ON c.oid = r.prrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = $1 \
         UNION ALL \
         SELECT format('table %s.%s columns %s%s', schemaname, tablename, attnames::text, \
                       coalesce(' where ' || rowfilter, '')) \
             FROM pg_publication_tables WHERE pubname = $1 \
         ORDER BY 1"
    } else {
        "SELECT format('table %s.%s named', n.nspname, c.relname) FROM pg_publication_rel r \
             JOIN pg_publication p ON p.oid = r.prpubid JOIN pg_class c ON c.oid = r.prrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = $1 \
         ORDER BY 1"
    };
    let rows = catalog
        .client()
        .query(sql, &[&name])
        .await
        .map_err(|e| classify_pg("cannot read the publication's definition", e))?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Applies the plan in one transaction (`create`: the publication is new), checks PostgreSQL
/// still accepts updates and deletes on every filtered table, and commits only when the
/// definition changed; logs what changed.
async fn apply(
    catalog: &PgCatalog,
    name: &str,
    plan: &PublicationPlan,
    create: bool,
) -> Result<(), PipelineError> {
    let client = catalog.client();
    client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| classify_pg("cannot begin a transaction", e))?;
    let result = apply_in_transaction(catalog, name, plan, create).await;
    let end = match &result {
        Ok(Some(_)) => "COMMIT",
        _ => "ROLLBACK",
    };
    let ended = client.batch_execute(end).await;
    let changes = result?;
    ended.map_err(|e| classify_pg(format!("cannot update publication {name:?}"), e))?;
    match changes {
        None => tracing::debug!(publication = %name, "publication is as the pipeline file asks"),
        Some((_, added)) if create => {
            tracing::info!(publication = %name, definition = ?added, "created publication");
        }
        Some((removed, added)) => tracing::info!(
            publication = %name,
            removed = ?removed,
            added = ?added,
            "updated publication to match the pipeline file (changes already in the WAL keep the old definition)"
        ),
    }
    Ok(())
}

/// The lines removed and added, or `None` when nothing changed.
type Changes = Option<(Vec<String>, Vec<String>)>;

async fn apply_in_transaction(
    catalog: &PgCatalog,
    name: &str,
    plan: &PublicationPlan,
    create: bool,
) -> Result<Changes, PipelineError> {
    let client = catalog.client();
    let before = if create {
        Vec::new()
    } else {
        describe(catalog, name).await?
    };
    for (sql, table) in plan.statements(name, create) {
        client.batch_execute(&sql).await.map_err(|e| match table {
            Some(table) if is_definition_error(&e) => PipelineError::fatal_with(
                format!(
                    "PostgreSQL refuses the filters of {} ({}) in publication {name:?}",
                    table.qualified(),
                    table.config_key()
                ),
                "a row filter must be a simple condition on the table's columns (no user-defined or volatile functions, no subqueries); see the cause",
                e,
            ),
            _ => classify_pg(
                format!(
                    "cannot {} publication {name:?}",
                    if create { "create" } else { "update" }
                ),
                e,
            ),
        })?;
    }
    // PostgreSQL accepts a row filter on any column, but then refuses every UPDATE and DELETE
    // of the table unless the filter uses only replica-identity columns: find out now.
    for table in plan.tables.iter().filter(|t| t.is_filtered()) {
        let sql = format!(
            "DELETE FROM {}.{} WHERE false",
            quote_ident(&table.schema),
            quote_ident(&table.table)
        );
        client.batch_execute(&sql).await.map_err(|e| {
            if e.code() == Some(&SqlState::INVALID_COLUMN_REFERENCE) {
                PipelineError::fatal_with(
                    format!(
                        "{}: with this filter in publication {name:?}, PostgreSQL would refuse every UPDATE and DELETE of {}",
                        table.config_key(),
                        table.qualified()
                    ),
                    format!(
                        "a row filter may only use the table's replica-identity columns (the primary key): filter on those, or run ALTER TABLE {}.{} REPLICA IDENTITY FULL (an update that leaves the filter is then published as a delete)",
                        quote_ident(&table.schema),
                        quote_ident(&table.table)
                    ),
                    e,
                )
            } else {
                classify_pg(format!("cannot check the publication of {}", table.qualified()), e)
            }
        })?;
    }
    let after = describe(catalog, name).await?;
    if !create && before == after {
        return Ok(None);
    }
    let removed = before
        .iter()
        .filter(|l| !after.contains(l))
        .cloned()
        .collect();
    let added = after
        .iter()
        .filter(|l| !before.contains(l))
        .cloned()
        .collect();
    Ok(Some((removed, added)))
}

/// Errors that say the definition itself is wrong (syntax, unknown column, disallowed
/// expression), as opposed to connection or permission trouble.
fn is_definition_error(error: &tokio_postgres::Error) -> bool {
    error.code().is_some_and(|code| {
        let code = code.code();
        (code.starts_with("42") && code != "42501") || matches!(code, "0A000" | "22P02")
    })
}

/// Where [`ensure`] runs: on a server that can write, or on a standby, where the publication
/// can only be checked (it is created on the primary and reaches the standby by replication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A primary (or a server without standbys).
    Server,
    /// A physical standby the pipeline decodes on, without a primary connection.
    Standby,
}

impl PgCatalog {
    /// Creates the publication when absent (and allowed) and keeps it in step with the
    /// pipeline's filters (see [the module docs](self)).
    ///
    /// # Errors
    ///
    /// Fatal when it is missing and may not be created, or PostgreSQL refuses it or a filter.
    pub async fn ensure_publication(
        &self,
        config: &PgPipelineConfig,
        tables: &[CapturedTable],
    ) -> Result<PublicationPlan, PipelineError> {
        ensure(self, config, tables, Place::Server).await
    }

    /// On a standby without a primary connection: checks that the publication exists and
    /// publishes what the pipeline needs, changing nothing.
    ///
    /// # Errors
    ///
    /// Fatal when it is missing, with the statements to run on the primary.
    pub async fn check_publication_on_standby(
        &self,
        config: &PgPipelineConfig,
        tables: &[CapturedTable],
    ) -> Result<PublicationPlan, PipelineError> {
        ensure(self, config, tables, Place::Standby).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, columns: Option<&[&str]>, filter: Option<&str>) -> PublishedTable {
        PublishedTable {
            schema: "s".into(),
            table: name.into(),
            columns: columns.map(|c| c.iter().map(|c| (*c).to_owned()).collect()),
            left_out: Vec::new(),
            filter: filter.map(str::to_owned),
        }
    }

    #[test]
    fn statements_add_each_filtered_table_on_its_own() {
        let plan = PublicationPlan {
            schemas: vec!["other".into()],
            tables: vec![
                table("plain", None, None),
                table("users", Some(&["id", "nick"]), None),
                table("orders", None, Some("status <> 'draft'")),
            ],
            client_side: Vec::new(),
            via_root: None,
            generated: None,
        };
        let statements: Vec<String> = plan
            .statements("p", true)
            .into_iter()
            .map(|(sql, _)| sql)
            .collect();
        assert_eq!(
            statements,
            [
                "CREATE PUBLICATION \"p\" FOR TABLES IN SCHEMA \"other\", TABLE \"s\".\"plain\"",
                "ALTER PUBLICATION \"p\" ADD TABLE \"s\".\"users\" (\"id\", \"nick\")",
                "ALTER PUBLICATION \"p\" ADD TABLE \"s\".\"orders\" WHERE (status <> 'draft')",
            ]
        );
        assert!(plan.pushes_down());
    }

    #[test]
    fn plain_tables_are_one_table_list_as_postgresql_14_has_it() {
        let plan = PublicationPlan {
            schemas: Vec::new(),
            tables: vec![table("a", None, None), table("b", None, None)],
            client_side: Vec::new(),
            via_root: None,
            generated: None,
        };
        assert_eq!(
            plan.statements("p", true)[0].0,
            "CREATE PUBLICATION \"p\" FOR TABLE \"s\".\"a\", \"s\".\"b\""
        );
    }

    #[test]
    fn a_plan_of_filtered_tables_only_sets_the_first() {
        let plan = PublicationPlan {
            schemas: Vec::new(),
            tables: vec![
                table("a", None, Some("id > 1")),
                table("b", None, Some("id > 2")),
            ],
            client_side: Vec::new(),
            via_root: None,
            generated: None,
        };
        assert_eq!(
            plan.alter_sql("p"),
            "ALTER PUBLICATION \"p\" SET TABLE \"s\".\"a\" WHERE (id > 1); \
             ALTER PUBLICATION \"p\" ADD TABLE \"s\".\"b\" WHERE (id > 2)"
        );
    }

    #[test]
    fn under_partitions_root_the_publication_publishes_via_the_root() {
        let plan = PublicationPlan {
            schemas: vec!["public".into()],
            tables: Vec::new(),
            client_side: Vec::new(),
            via_root: Some(true),
            generated: None,
        };
        assert_eq!(
            plan.statements("p", true)[0].0,
            "CREATE PUBLICATION \"p\" FOR TABLES IN SCHEMA \"public\" WITH (publish_via_partition_root = true)"
        );
        assert_eq!(
            plan.alter_sql("p"),
            "ALTER PUBLICATION \"p\" SET TABLES IN SCHEMA \"public\"; \
             ALTER PUBLICATION \"p\" SET (publish_via_partition_root = true)"
        );
        let leaves = PublicationPlan {
            via_root: Some(false),
            ..plan
        };
        assert!(
            !leaves.statements("p", true)[0]
                .0
                .contains("publish_via_partition_root"),
            "false is PostgreSQL's default"
        );
    }

    #[test]
    fn generated_columns_are_a_publication_option_on_18() {
        let plan = PublicationPlan {
            schemas: vec!["public".into()],
            tables: Vec::new(),
            client_side: Vec::new(),
            via_root: Some(true),
            generated: Some(true),
        };
        assert_eq!(
            plan.statements("p", true)[0].0,
            "CREATE PUBLICATION \"p\" FOR TABLES IN SCHEMA \"public\" WITH (publish_via_partition_root = true, publish_generated_columns = stored)"
        );
        assert!(
            plan.alter_sql("p")
                .ends_with("ALTER PUBLICATION \"p\" SET (publish_generated_columns = stored)")
        );
        let off = PublicationPlan {
            generated: Some(false),
            ..plan
        };
        assert!(
            !off.statements("p", true)[0]
                .0
                .contains("publish_generated_columns"),
            "none is PostgreSQL's default"
        );
    }
}
