//! The SQL side of the PostgreSQL source: server checks, the tables to capture, the
//! publication and the slot, primary keys, heartbeats and slot lag.
//!
//! Each check that an operator must fix fails with a [`PipelineError::Fatal`] naming the fix;
//! connection trouble is retryable.

use sluice_engine::Lsn;
use tokio_postgres::Client;

use super::config::{PartitionMode, PgPipelineConfig};
use crate::config::parse_table_name;
use crate::error::{PipelineError, classify_pg};

/// A SQL connection to the source database.
pub struct PgCatalog {
    client: Client,
    connection: tokio::task::JoinHandle<()>,
}

/// A captured table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedTable {
    /// Schema.
    pub schema: String,
    /// Table.
    pub table: String,
    /// Replica identity: `d`efault, `f`ull, `i`ndex or `n`othing.
    pub replica_identity: char,
    /// Whether it has a primary key.
    pub has_primary_key: bool,
    /// `partitions = "leaves"`: the partitioned tables above this leaf (`schema.table` each),
    /// nearest first, its root last. Rules that name one of them cover the leaf (see
    /// [`CapturedTable::rule_names`]).
    pub ancestors: Vec<String>,
    /// Its OID.
    pub oid: u32,
}

impl CapturedTable {
    /// `schema.table`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// `schema.table` with each name quoted for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.table))
    }

    /// `partitions = "leaves"`: the partitioned table at the top of this leaf's tree.
    pub fn root(&self) -> Option<&str> {
        self.ancestors.last().map(String::as_str)
    }

    /// The names the pipeline's rules (filters, column rules, row filters) are looked up by:
    /// `schema.table`, then the partitioned tables above it.
    pub fn rule_names(&self) -> Vec<String> {
        std::iter::once(self.qualified())
            .chain(self.ancestors.iter().cloned())
            .collect()
    }
}

/// The server's WAL position in SQL: `pg_current_wal_lsn()` on a primary; on a standby
/// (where that function fails) the position it has replayed, the end of what its slots can
/// decode.
pub const SERVER_WAL_LSN: &str =
    "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END";

/// A slot's position against the server's.
#[derive(Debug, Clone)]
pub struct SlotLag {
    /// The slot's confirmed flush position.
    pub confirmed_flush: Lsn,
    /// `pg_current_wal_lsn() - confirmed_flush_lsn` (on a standby, its replay position).
    pub lag_bytes: i64,
    /// `pg_current_wal_lsn()` (on a standby, its replay position: [`SERVER_WAL_LSN`]).
    pub server_wal: Lsn,
    /// `wal_status`.
    pub wal_status: String,
}

/// A replication slot's state.
#[derive(Debug, Clone)]
pub struct SlotInfo {
    /// The output plugin.
    pub plugin: String,
    /// The confirmed flush position.
    pub confirmed_flush: Lsn,
    /// Whether a connection streams from it now.
    pub active: bool,
    /// `wal_status`: `reserved`, `extended`, `unreserved` or `lost` (empty when unknown).
    pub wal_status: String,
}

/// A user-defined type as the catalog describes it, for [`super::encode::RelationInfo::resolve_types`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserType {
    /// A domain: its base type (domains over domains followed) and type modifier.
    Domain {
        /// The base type.
        base: u32,
        /// The base type's modifier in the domain (`-1` for none).
        modifier: i32,
    },
    /// An enum.
    Enum,
    /// An array of an enum.
    EnumArray,
    /// A composite type, or an array of one: Debezium leaves such columns out.
    Composite,
    /// Anything else (extension types): mapped as text.
    Other,
}

impl PgCatalog {
    /// Connects with the pipeline's URL.
    ///
    /// # Errors
    ///
    /// Fatal for authentication and missing databases, retryable otherwise.
    pub async fn connect(config: &PgPipelineConfig) -> Result<Self, PipelineError> {
        Self::connect_to(config, &config.source.connection(), "source.postgres.url").await
    }

    /// Connects to the primary of `source.postgres.primary_url` (see [`super::standby`]);
    /// `None` when the key is not set.
    ///
    /// # Errors
    ///
    /// As [`PgCatalog::connect`].
    pub async fn connect_primary(config: &PgPipelineConfig) -> Result<Option<Self>, PipelineError> {
        match config.source.primary_connection() {
            None => Ok(None),
            Some(connection) => {
                Self::connect_to(config, &connection, "source.postgres.primary_url")
                    .await
                    .map(Some)
            }
        }
    }

    /// Connects with `connection`, the connection string of the pipeline file's `key`.
    async fn connect_to(
        config: &PgPipelineConfig,
        connection: &str,
        key: &str,
    ) -> Result<Self, PipelineError> {
        let mut pg_config = crate::pg_connect::PgConnectConfig::parse(connection).map_err(|e| {
            PipelineError::fatal(
                format!("{key}: {e}"),
                "expected postgres://user[:password]@host[:port]/database[?sslmode=...]",
            )
        })?;
        pg_config
            .pg
            .application_name(format!("sluice-{}", config.name));
        pg_config
            .pg
            .connect_timeout(std::time::Duration::from_secs(10));
        // A peer that vanished is noticed by TCP within about a minute, not ~15.
        pg_config
            .pg
            .keepalives(true)
            .keepalives_idle(std::time::Duration::from_secs(30))
            .keepalives_interval(std::time::Duration::from_secs(10))
            .keepalives_retries(3);
        let (client, connection) = crate::pg_connect::connect_sql(&pg_config)
            .await
            .map_err(|e| match e {
                crate::pg_connect::ConnectError::Config(e) => PipelineError::fatal(
                    format!("{key}: {e}"),
                    format!("fix the TLS parameters of {key}"),
                ),
                e @ crate::pg_connect::ConnectError::Connect { .. } if e.is_tls_refusal() => {
                    PipelineError::fatal(
                        e.to_string(),
                        "check sslmode and sslrootcert in source.postgres.url and the server's TLS setup",
                    )
                }
                crate::pg_connect::ConnectError::Connect { message, source } => {
                    classify_pg(message, source)
                }
            })?;
        let pg = &config.source;
        let mut settings: String = super::replication::SESSION_SETTINGS
            .iter()
            .map(|(name, value)| format!("SET {name} = '{value}'; "))
            .collect();
        // No statement or lock wait of sluice's runs unbounded on the server (a lock held by
        // someone's long transaction, a catalog query stuck behind it).
        settings.push_str(&format!(
            "SET statement_timeout = {}; SET lock_timeout = {}; ",
            pg.statement_timeout_ms, pg.lock_timeout_ms
        ));
        client
            .batch_execute(&settings)
            .await
            .map_err(|e| classify_pg("cannot set the session's output settings", e))?;
        Ok(Self { client, connection })
    }

    /// The client, for ad-hoc queries.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Fails unless `wal_level` is `logical`.
    ///
    /// # Errors
    ///
    /// Fatal with the fix when it is not.
    pub async fn check_wal_level(&self) -> Result<(), PipelineError> {
        let row = self
            .client
            .query_one("SELECT current_setting('wal_level')", &[])
            .await
            .map_err(|e| classify_pg("cannot read wal_level", e))?;
        let level: String = row.get(0);
        if level != "logical" {
            return Err(PipelineError::fatal(
                format!(
                    "PostgreSQL's wal_level is '{level}', but logical replication needs 'logical'"
                ),
                "run ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (also check max_replication_slots and max_wal_senders are at least 1 more than in use)",
            ));
        }
        Ok(())
    }

    /// The current database's name.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn database(&self) -> Result<String, PipelineError> {
        let row = self
            .client
            .query_one("SELECT current_database()", &[])
            .await
            .map_err(|e| classify_pg("cannot read the database name", e))?;
        Ok(row.get(0))
    }

    /// The server's major version number (e.g. 15).
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn server_major_version(&self) -> Result<u32, PipelineError> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('server_version_num')::int / 10000",
                &[],
            )
            .await
            .map_err(|e| classify_pg("cannot read the server version", e))?;
        Ok(row.get::<_, i32>(0) as u32)
    }

    /// The tables the pipeline captures: every table of `schemas` plus `tables`.
    ///
    /// # Errors
    ///
    /// Fatal when a configured table or schema does not exist.
    pub async fn captured_tables(
        &self,
        config: &PgPipelineConfig,
    ) -> Result<Vec<CapturedTable>, PipelineError> {
        let pg = &config.source;
        let mode = self.partition_mode(config).await?;
        let leaves = mode == PartitionMode::Leaves;
        // `root`: plain and partitioned tables that are no partition; `leaves`: plain tables
        // and partitions that hold rows (a leaf's root is named for its filters and rules).
        const TABLES: &str = "SELECT n.nspname::text, c.relname::text, c.relreplident::text, \
               EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
               ARRAY(SELECT format('%s.%s', rn.nspname, r.relname) \
                  FROM pg_partition_ancestors(c.oid) WITH ORDINALITY a(relid, n) \
                  JOIN pg_class r ON r.oid = a.relid \
                  JOIN pg_namespace rn ON rn.oid = r.relnamespace \
                  WHERE c.relispartition AND a.relid <> c.oid ORDER BY a.n), \
               c.oid::int8 \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND ($2::text IS NULL OR c.relname = $2) \
               AND CASE WHEN $3 THEN c.relkind = 'r' \
                        ELSE c.relkind IN ('r', 'p') AND NOT c.relispartition END \
             ORDER BY 1, 2";
        // `leaves`: a partitioned table named in `tables` stands for its leaves.
        const LEAVES_OF: &str = "SELECT n.nspname::text, c.relname::text, c.relreplident::text, \
               EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
               ARRAY(SELECT format('%s.%s', an.nspname, ar.relname) \
                  FROM pg_partition_ancestors(c.oid) WITH ORDINALITY a(relid, n) \
                  JOIN pg_class ar ON ar.oid = a.relid \
                  JOIN pg_namespace an ON an.oid = ar.relnamespace \
                  WHERE a.relid <> c.oid ORDER BY a.n), \
               c.oid::int8 \
             FROM pg_class r JOIN pg_namespace rn ON rn.oid = r.relnamespace \
             CROSS JOIN LATERAL pg_partition_tree(r.oid) t \
             JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE rn.nspname = $1 AND r.relname = $2 AND r.relkind = 'p' AND c.relkind = 'r' \
             ORDER BY 1, 2";
        let mut tables = Vec::new();
        let mut push = |row: &tokio_postgres::Row| {
            let table = CapturedTable {
                schema: row.get(0),
                table: row.get(1),
                replica_identity: row.get::<_, String>(2).chars().next().unwrap_or('d'),
                has_primary_key: row.get(3),
                ancestors: row.get(4),
                oid: u32::try_from(row.get::<_, i64>(5)).unwrap_or_default(),
            };
            if !tables.contains(&table) {
                tables.push(table);
            }
        };
        for (index, schema) in pg.schemas.iter().enumerate() {
            let exists = self
                .client
                .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[schema])
                .await
                .map_err(|e| classify_pg("cannot list schemas", e))?;
            if exists.is_none() {
                return Err(PipelineError::fatal(
                    format!("schema {schema:?} (source.postgres.schemas[{index}]) does not exist"),
                    "fix the schema name in the pipeline file, or create the schema",
                ));
            }
            let rows = self
                .client
                .query(TABLES, &[schema, &None::<String>, &leaves])
                .await
                .map_err(|e| classify_pg("cannot list tables", e))?;
            rows.iter().for_each(&mut push);
        }
        let listed = pg
            .tables
            .iter()
            .enumerate()
            .map(|(index, name)| (format!("source.postgres.tables[{index}]"), name));
        let outbox = pg
            .outbox
            .iter()
            .map(|o| ("source.postgres.outbox.table".to_owned(), &o.table));
        for (key, name) in listed.chain(outbox) {
            let Some((schema, table)) = parse_table_name(name) else {
                continue;
            };
            let mut rows = self
                .client
                .query(TABLES, &[&schema, &Some(table), &leaves])
                .await
                .map_err(|e| classify_pg("cannot list tables", e))?;
            if rows.is_empty() && leaves {
                rows = self
                    .client
                    .query(LEAVES_OF, &[&schema, &table])
                    .await
                    .map_err(|e| classify_pg("cannot list partitions", e))?;
            }
            if rows.is_empty() {
                if let Some(root) = self.root_of(schema, table).await? {
                    return Err(PipelineError::fatal(
                        format!(
                            "table {name} ({key}) is a partition of {root}, and source.postgres.partitions = \"{}\" captures partitioned tables under their root",
                            mode.as_str()
                        ),
                        format!(
                            "list {root} instead (its partitions' changes go to its topic), or set source.postgres.partitions = \"leaves\" to capture each partition on its own"
                        ),
                    ));
                }
                return Err(PipelineError::fatal(
                    format!("table {name} ({key}) does not exist"),
                    "fix the table name in the pipeline file (schema.table, case-sensitive), or create the table",
                ));
            }
            rows.iter().for_each(&mut push);
        }
        tables.retain(|t| !pg.excludes_any(&t.rule_names()));
        Ok(tables)
    }

    /// How partitioned tables are captured on this server: `source.postgres.partitions`, or
    /// its default for the server's version.
    ///
    /// # Errors
    ///
    /// Fatal when `root` is asked for on a server older than 13; retryable on connection
    /// trouble.
    pub async fn partition_mode(
        &self,
        config: &PgPipelineConfig,
    ) -> Result<PartitionMode, PipelineError> {
        let version = self.server_major_version().await?;
        PartitionMode::resolve(config.source.partitions, version)
            .map_err(|(problem, fix)| PipelineError::fatal(problem, fix))
    }

    /// The partitioned table at the top of `schema.table`'s tree, when it is a partition.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn root_of(
        &self,
        schema: &str,
        table: &str,
    ) -> Result<Option<String>, PipelineError> {
        let row = self
            .client
            .query_opt(
                "SELECT format('%s.%s', rn.nspname, r.relname) \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 CROSS JOIN LATERAL pg_partition_ancestors(c.oid) a \
                 JOIN pg_class r ON r.oid = a.relid JOIN pg_namespace rn ON rn.oid = r.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relispartition \
                   AND NOT r.relispartition",
                &[&schema, &table],
            )
            .await
            .map_err(|e| classify_pg("cannot read a partition's root", e))?;
        Ok(row.map(|row| row.get(0)))
    }

    /// The partitioned tables above the table `oid` (`schema.table` each, nearest first; none
    /// when it is no partition): a rule naming one of them covers it under
    /// `partitions = "leaves"`.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn ancestors(&self, oid: u32) -> Result<Vec<String>, PipelineError> {
        let rows = self
            .client
            .query(
                "SELECT format('%s.%s', n.nspname, c.relname) \
                 FROM pg_partition_ancestors($1::oid) WITH ORDINALITY a(relid, n) \
                 JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE a.relid <> $1::oid ORDER BY a.n",
                &[&oid],
            )
            .await
            .map_err(|e| classify_pg("cannot read a partition's partitioned tables", e))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// The slot, if it exists.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn slot(&self, name: &str) -> Result<Option<SlotInfo>, PipelineError> {
        let row = self
            .client
            .query_opt(
                "SELECT coalesce(plugin, ''), coalesce(confirmed_flush_lsn::text, '0/0'), active, \
                        coalesce(wal_status, '') \
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&name],
            )
            .await
            .map_err(|e| classify_pg("cannot read replication slots", e))?;
        Ok(row.map(|row| SlotInfo {
            plugin: row.get(0),
            confirmed_flush: row.get::<_, String>(1).parse().unwrap_or_default(),
            active: row.get(2),
            wal_status: row.get(3),
        }))
    }

    /// Drops a slot (one that is not active).
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble, fatal when the server refuses.
    pub async fn drop_slot(&self, name: &str) -> Result<(), PipelineError> {
        self.client
            .execute("SELECT pg_drop_replication_slot($1)", &[&name])
            .await
            .map_err(|e| classify_pg(format!("cannot drop replication slot {name:?}"), e))?;
        tracing::warn!(slot = name, "dropped replication slot");
        Ok(())
    }

    /// Creates the logical slot when absent; returns its state.
    ///
    /// # Errors
    ///
    /// Fatal when a slot of that name uses another plugin or is physical, or the server refuses
    /// to create one (no free slots, privileges).
    pub async fn ensure_slot(&self, name: &str) -> Result<(SlotInfo, bool), PipelineError> {
        if let Some(slot) = self.slot(name).await? {
            if slot.plugin != "pgoutput" {
                return Err(PipelineError::fatal(
                    format!(
                        "replication slot {name:?} exists but uses plugin {:?}, not pgoutput",
                        slot.plugin
                    ),
                    "choose another source.postgres.slot, or drop that slot if nothing else uses it",
                ));
            }
            return Ok((slot, false));
        }
        self.client
            .query_one(
                "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&name],
            )
            .await
            .map_err(|e| match e.code().map(|c| c.code()) {
                Some("53400") => PipelineError::fatal_with(
                    format!("cannot create replication slot {name:?}: all replication slots are in use"),
                    "raise max_replication_slots (and restart PostgreSQL), or drop unused slots (see pg_replication_slots)",
                    e,
                ),
                _ => classify_pg(format!("cannot create replication slot {name:?}"), e),
            })?;
        tracing::info!(slot = name, "created replication slot");
        let slot = self.slot(name).await?.ok_or_else(|| {
            PipelineError::fatal(
                format!("replication slot {name:?} vanished right after it was created"),
                "check whether another process drops slots",
            )
        })?;
        Ok((slot, true))
    }

    /// The primary key's column names of a relation (by OID), in key order.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn primary_key(&self, relation_oid: u32) -> Result<Vec<String>, PipelineError> {
        let rows = self
            .client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1::oid AND i.indisprimary ORDER BY k.n",
                &[&relation_oid],
            )
            .await
            .map_err(|e| classify_pg("cannot read a primary key", e))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// What the catalog says of user-defined column types (see
    /// [`super::encode::RelationInfo::user_type_oids`]): domains with their base type, enums,
    /// enum arrays, composites. No query when `oids` is empty.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn user_types(
        &self,
        oids: &[u32],
    ) -> Result<std::collections::HashMap<u32, UserType>, PipelineError> {
        let mut types = std::collections::HashMap::new();
        if oids.is_empty() {
            return Ok(types);
        }
        // A domain's base type, domains over domains followed; the first modifier found
        // from the column's type down is the one that applies.
        let rows = self
            .client
            .query(
                "WITH RECURSIVE d(oid, base, modifier, depth) AS ( \
                   SELECT t.oid, t.oid, -1, 0 FROM pg_type t WHERE t.oid = ANY($1::oid[]) \
                   UNION ALL \
                   SELECT d.oid, t.typbasetype, \
                          CASE WHEN d.modifier = -1 THEN t.typtypmod ELSE d.modifier END, d.depth + 1 \
                   FROM d JOIN pg_type t ON t.oid = d.base AND t.typtype = 'd' WHERE d.depth < 16) \
                 SELECT DISTINCT ON (d.oid) d.oid, d.base, d.modifier, b.typtype::text, \
                        coalesce(e.typtype::text, '') \
                 FROM d JOIN pg_type b ON b.oid = d.base \
                 LEFT JOIN pg_type e ON e.oid = b.typelem AND b.typcategory = 'A' \
                 ORDER BY d.oid, d.depth DESC",
                &[&oids],
            )
            .await
            .map_err(|e| classify_pg("cannot read the columns' types", e))?;
        for row in rows {
            let oid: u32 = row.get(0);
            let base: u32 = row.get(1);
            let modifier: i32 = row.get(2);
            let kind: String = row.get(3);
            let element: String = row.get(4);
            let resolved = match (kind.as_str(), element.as_str()) {
                ("c", _) | (_, "c") => UserType::Composite,
                ("e", _) => UserType::Enum,
                (_, "e") => UserType::EnumArray,
                _ if base != oid => UserType::Domain { base, modifier },
                _ => UserType::Other,
            };
            types.insert(oid, resolved);
        }
        Ok(types)
    }

    /// Writes a heartbeat message into the WAL.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn emit_heartbeat(&self) -> Result<(), PipelineError> {
        self.client
            .execute(
                "SELECT pg_logical_emit_message(false, $1, '')",
                &[&super::config::HEARTBEAT_MESSAGE_PREFIX],
            )
            .await
            .map_err(|e| classify_pg("cannot write a heartbeat", e))?;
        Ok(())
    }

    /// The slot's confirmed position and the WAL bytes behind the server's current position.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn slot_lag(&self, slot: &str) -> Result<Option<SlotLag>, PipelineError> {
        let row = self
            .client
            .query_opt(
                &format!(
                    "SELECT coalesce(confirmed_flush_lsn::text, '0/0'), \
                        coalesce(({SERVER_WAL_LSN} - confirmed_flush_lsn)::bigint, 0), \
                        coalesce(({SERVER_WAL_LSN})::text, '0/0'), coalesce(wal_status, '') \
                 FROM pg_replication_slots WHERE slot_name = $1"
                ),
                &[&slot],
            )
            .await
            .map_err(|e| classify_pg("cannot read slot lag", e))?;
        Ok(row.map(|row| SlotLag {
            confirmed_flush: row.get::<_, String>(0).parse().unwrap_or_default(),
            lag_bytes: row.get::<_, i64>(1),
            server_wal: row.get::<_, String>(2).parse().unwrap_or_default(),
            wal_status: row.get(3),
        }))
    }
}

impl Drop for PgCatalog {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

pub use crate::sql::quote_ident;

/// `host:port` of a connection config, for messages (never the password).
pub use crate::pg_connect::describe_host;
