//! The source side of `sluice verify` on PostgreSQL: a snapshot whose position is known, and
//! the tables' checksums and rows read under it.
//!
//! The snapshot comes from a temporary logical slot created with `EXPORT_SNAPSHOT` on a
//! replication connection: PostgreSQL guarantees that it sees exactly the transactions whose
//! commit record is before the slot's consistent point (the same guarantee the initial
//! snapshot of every logical replication tool rests on), and every record sluice writes carries
//! its transaction's commit LSN (`sluice.commit_lsn`). The slot holds no WAL beyond the
//! verification: it is temporary and goes with the connection, which stays open (idle) while the
//! snapshot is used, as an exported snapshot lives only that long.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::Lsn;
use tokio_postgres::Client;

use super::canonical::{ArrayElement, ColumnClass, bucket_sql, form_sql, hash_sql};
use crate::config::StateStoreKind;
use crate::error::{PipelineError, classify_pg};
use crate::event::EventOptions;
use crate::kafka_state::KafkaStateStore;
use crate::source::postgres::config::{PgPipelineConfig, PostgresSourceConfig};
use crate::source::postgres::encode::ColumnTreatment;
use crate::source::postgres::replication::ReplicationConnection;
use crate::source::postgres::setup::{CapturedTable, PgCatalog};
use crate::source::postgres::slot_state::{SlotRecord, SlotStateFile};
use crate::sql::quote_ident;

/// A compared column.
#[derive(Debug, Clone)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// How its values compare.
    pub class: ColumnClass,
}

/// One table as verified: what is compared, and how it is read.
#[derive(Debug, Clone)]
pub struct TablePlan {
    /// `schema.table`.
    pub qualified: String,
    /// The topic its events go to.
    pub topic: String,
    /// The compared columns, in column order.
    pub columns: Vec<Column>,
    /// The key columns, in key order.
    pub key: Vec<Column>,
    /// Columns left out of the comparison, with the reason.
    pub not_compared: Vec<(String, String)>,
    /// `FROM` target: the quoted name, `ONLY` unless partitioned.
    pub(super) from: String,
    /// The pipeline's row filter of the table.
    pub(super) filter: Option<String>,
    /// How many buckets its keys are spread over.
    pub buckets: u32,
}

impl TablePlan {
    pub(super) fn where_clause(&self, extra: Option<&str>) -> String {
        let mut conditions: Vec<String> = Vec::new();
        if let Some(filter) = &self.filter {
            conditions.push(format!("({filter})"));
        }
        if let Some(extra) = extra {
            conditions.push(extra.to_owned());
        }
        if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        }
    }

    fn pairs(columns: &[Column]) -> Vec<(&str, &ColumnClass)> {
        columns
            .iter()
            .map(|c| (c.name.as_str(), &c.class))
            .collect()
    }
}

/// Per bucket: rows and the sum of their hashes.
pub type Buckets = Vec<(u64, i128)>;

/// A source row of a differing bucket.
#[derive(Debug, Clone)]
pub struct SourceRow {
    /// Its bucket.
    pub bucket: u32,
    /// The key columns' canonical texts.
    pub key: Vec<Option<String>>,
    /// The key columns' text output (for a repair's filter).
    pub key_text: Vec<Option<String>>,
    /// The compared columns' canonical texts.
    pub values: Vec<Option<String>>,
    /// The row as JSON (`to_jsonb`), for the report.
    pub json: serde_json::Value,
}

/// The verification's snapshot of the source.
pub struct SourceSnapshot {
    /// Held open: the exported snapshot lives as long as this connection runs no command.
    _replication: ReplicationConnection,
    catalog: PgCatalog,
    /// The slot's consistent point: the snapshot sees exactly the transactions that committed
    /// before it.
    pub position: Lsn,
}

/// How many rows one `FETCH` takes at most.
const FETCH_ROWS: u64 = 10_000;

impl SourceSnapshot {
    /// Creates the temporary slot and imports its snapshot on a SQL connection.
    ///
    /// # Errors
    ///
    /// The server cannot be reached, refuses the replication connection or the slot.
    pub async fn open(config: &PgPipelineConfig) -> Result<Self, PipelineError> {
        let pg_config = crate::pg_connect::PgConnectConfig::parse(&config.source.connection())
            .map_err(|e| {
                PipelineError::fatal_with("source.postgres.url is invalid", "see `sluice check`", e)
            })?;
        let mut replication =
            ReplicationConnection::connect(&pg_config, &format!("sluice-verify-{}", config.name))
                .await
                .map_err(|e| {
                    PipelineError::fatal_with(
                        "cannot open a replication connection to PostgreSQL",
                        "check source.postgres.url, that the server is up, and the user's REPLICATION privilege",
                        e,
                    )
                })?;
        let slot = format!(
            "sluice_verifying_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        );
        let rows = replication
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT \"{slot}\" TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
            ))
            .await
            .map_err(|e| {
                PipelineError::fatal_with(
                    "cannot create the verification's temporary replication slot",
                    "a free replication slot is needed while verifying (max_replication_slots)",
                    e,
                )
            })?;
        let row = rows.first().filter(|r| r.len() >= 3).ok_or_else(|| {
            PipelineError::fatal(
                "CREATE_REPLICATION_SLOT returned no row",
                "a PostgreSQL 14 or later server is expected",
            )
        })?;
        let position: Lsn = row[1].as_deref().unwrap_or_default().parse().map_err(|e| {
            PipelineError::retryable("CREATE_REPLICATION_SLOT returned no consistent point", e)
        })?;
        let snapshot = row[2].clone().unwrap_or_default();
        let catalog = PgCatalog::connect(config).await?;
        catalog
            .client()
            .batch_execute(&format!(
                "SET application_name = {}; \
                 BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
                 SET TRANSACTION SNAPSHOT {}; \
                 SET LOCAL idle_in_transaction_session_timeout = 0",
                crate::sql::quote_pg_literal(&format!("sluice-verify-{}", config.name)),
                crate::sql::quote_pg_literal(&snapshot)
            ))
            .await
            .map_err(|e| classify_pg("cannot import the verification's snapshot", e))?;
        Ok(Self {
            _replication: replication,
            catalog,
            position,
        })
    }

    /// The SQL connection holding the snapshot.
    pub fn client(&self) -> &Client {
        self.catalog.client()
    }

    /// The captured tables (by the pipeline's configuration).
    ///
    /// # Errors
    ///
    /// Catalog queries failed.
    pub async fn tables(
        &self,
        config: &PgPipelineConfig,
    ) -> Result<Vec<CapturedTable>, PipelineError> {
        self.catalog.captured_tables(config).await
    }

    /// What of `table` is compared; `Err` says why it cannot be verified (see
    /// [`plan_captured`]).
    ///
    /// # Errors
    ///
    /// `Ok(Err(reason))` for a table that cannot be verified; `Err` for failed queries.
    pub async fn plan(
        &self,
        config: &PgPipelineConfig,
        table: &CapturedTable,
    ) -> Result<Result<TablePlan, String>, PipelineError> {
        plan_captured(self.client(), config, table).await
    }

    /// The pipeline slot's confirmed position (`None`: no such slot).
    ///
    /// # Errors
    ///
    /// The query failed.
    pub async fn slot_confirmed(&self, slot: &str) -> Result<Option<Lsn>, PipelineError> {
        Ok(self.catalog.slot(slot).await?.map(|s| s.confirmed_flush))
    }
}

/// What of the captured `table` is compared, by the pipeline's rules (its columns excluded,
/// hashed or masked, its row filter), read with `client` (under the verification's snapshot,
/// or, for a sink's repair, the current catalog); `Err` says why it cannot be verified.
///
/// # Errors
///
/// `Ok(Err(reason))` for a table that cannot be verified; `Err` for failed queries.
pub async fn plan_captured(
    client: &Client,
    config: &PgPipelineConfig,
    table: &CapturedTable,
) -> Result<Result<TablePlan, String>, PipelineError> {
    let qualified = table.qualified();
    let pg: &PostgresSourceConfig = &config.source;
    if !table.has_primary_key {
        return Ok(Err(
            "no primary key: its records have no key to compare by".into()
        ));
    }
    let rule_names = table.rule_names();
    let left_out = |name: &str| match pg.column_treatment_of(&rule_names, name) {
        ColumnTreatment::Exclude => Some("excluded (source.postgres.columns.exclude)"),
        ColumnTreatment::Hash => Some("hashed (source.postgres.columns.hash)"),
        ColumnTreatment::Mask => Some("masked (source.postgres.columns.mask)"),
        _ => None,
    };
    plan_table(
        client,
        &PlanRules {
            quoted: table.quoted(),
            topic: format!("{}.{qualified}", config.kafka.topic_prefix),
            qualified,
            events: &config.kafka.events,
            left_out: &left_out,
            generated: (!pg.publish_generated_columns).then_some("generated (not published)"),
            filter: pg.row_filter_of(&rule_names),
        },
    )
    .await
}

/// What the pipeline's configuration lets verify compare; `Err` names what does not.
///
/// # Errors
///
/// Transforms, or operations left out of the topics.
pub fn check_supported(config: &PgPipelineConfig) -> anyhow::Result<()> {
    let events = &config.kafka.events;
    if !config.transforms.is_empty() {
        anyhow::bail!(
            "the pipeline has [transforms]: verify compares Debezium's envelopes in the default topics, not transformed records"
        );
    }
    let skipped = events.skipped_operations;
    if skipped.create || skipped.update || skipped.delete {
        anyhow::bail!(
            "kafka.events.skipped_operations leaves out inserts, updates or deletes: the topics cannot hold what the tables hold"
        );
    }
    if config.source.outbox.is_some() {
        tracing::info!("outbox tables are not verified (their topics are per aggregate)");
    }
    Ok(())
}

/// The pipeline's slot record in its state store (a Kafka state store is read without fencing
/// the running pipeline), with where it is kept; `None` when nothing is stored there (the state
/// directory is on another machine, or the pipeline never ran).
///
/// # Errors
///
/// The store cannot be read, or the record parsed.
pub async fn pipeline_record(
    config: &PgPipelineConfig,
) -> Result<(Option<SlotRecord>, String), PipelineError> {
    let state = match config.state_store {
        StateStoreKind::Local => {
            let dir = config.state_dir();
            if !dir.is_dir() {
                let file = dir.join(format!("{}.slot.json", config.name));
                return Ok((None, file.display().to_string()));
            }
            SlotStateFile::open(&dir, &config.name)?
        }
        StateStoreKind::Kafka => {
            let topic = config.state_topic();
            match KafkaStateStore::read_only(&config.kafka, topic, &config.name).await? {
                Some(store) => SlotStateFile::open_in(Arc::new(store), &config.name)?,
                None => return Ok((None, format!("kafka topic {topic}"))),
            }
        }
    };
    Ok((state.record().cloned(), state.location()))
}

/// What a pipeline says about one table's columns, for [`plan_table`].
pub struct PlanRules<'a> {
    /// `schema.table`, as reported.
    pub qualified: String,
    /// The table quoted for SQL.
    pub quoted: String,
    /// The topic its events are in.
    pub topic: String,
    /// The events' encoding options.
    pub events: &'a EventOptions,
    /// Why a column is left out of the events (excluded, hashed, masked); `None`: it is not.
    pub left_out: &'a (dyn Fn(&str) -> Option<&'static str> + Sync),
    /// Why generated columns are not compared; `None`: they are.
    pub generated: Option<&'static str>,
    /// The row filter: only the rows it selects are compared.
    pub filter: Option<String>,
}

/// What of a table is compared, from the catalog `client` reads (under the snapshot); `Err`
/// says why it cannot be verified.
///
/// # Errors
///
/// `Ok(Err(reason))` for a table that cannot be verified; `Err` for failed queries.
pub async fn plan_table(
    client: &Client,
    rules: &PlanRules<'_>,
) -> Result<Result<TablePlan, String>, PipelineError> {
    let (qualified, quoted, events) = (&rules.qualified, &rules.quoted, rules.events);
    let relkind: String = client
        .query_one(
            "SELECT relkind::text FROM pg_class WHERE oid = $1::text::regclass",
            &[quoted],
        )
        .await
        .map_err(|e| classify_pg(format!("cannot read {qualified}"), e))?
        .get(0);
    let rows = client
        .query(
            "SELECT a.attname::text, COALESCE(b.oid, t.oid)::oid, \
                    COALESCE(b.typtype, t.typtype)::text, \
                    CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, \
                    a.attgenerated IN ('s', 'v'), \
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid \
                            AND i.indisprimary AND a.attnum = ANY(i.indkey)), \
                    e.oid, e.typtype::text \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype \
             LEFT JOIN pg_type e ON COALESCE(b.typcategory, t.typcategory) = 'A' \
                  AND e.oid = COALESCE(b.typelem, t.typelem) \
             WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[quoted],
        )
        .await
        .map_err(|e| classify_pg(format!("cannot read the columns of {qualified}"), e))?;
    let key_names: Vec<String> = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1::text::regclass AND i.indisprimary ORDER BY k.n",
            &[quoted],
        )
        .await
        .map_err(|e| classify_pg(format!("cannot read the key of {qualified}"), e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if key_names.is_empty() {
        return Ok(Err(
            "no primary key: its rows have no key to compare by".into()
        ));
    }
    let mut columns = Vec::new();
    let mut not_compared = Vec::new();
    for row in &rows {
        let name: String = row.get(0);
        let type_oid: u32 = row.get(1);
        let typtype: String = row.get(2);
        let typmod: i32 = row.get(3);
        let generated: bool = row.get(4);
        let in_key: bool = row.get(5);
        let element = row.get::<_, Option<u32>>(6).map(|type_oid| ArrayElement {
            type_oid,
            is_enum: row.get::<_, Option<String>>(7).as_deref() == Some("e"),
        });
        let class = ColumnClass::of(type_oid, typtype == "e", typmod, element, events);
        let reason = match ((rules.left_out)(&name), &class) {
            (Some(reason), _) => Some(reason),
            (None, _) if generated && rules.generated.is_some() => rules.generated,
            (None, Err(reason)) => Some(*reason),
            (None, Ok(_)) => None,
        };
        match (reason, class) {
            (None, Ok(class)) => columns.push(Column { name, class }),
            (Some(reason), _) => {
                if in_key {
                    return Ok(Err(format!("key column {name:?}: {reason}")));
                }
                not_compared.push((name, reason.to_owned()));
            }
            (None, Err(_)) => unreachable!("a class error is a reason"),
        }
    }
    let key: Vec<Column> = key_names
        .iter()
        .filter_map(|k| columns.iter().find(|c| &c.name == k).cloned())
        .collect();
    if key.len() != key_names.len() || key.is_empty() {
        return Ok(Err("its key columns cannot be compared".into()));
    }
    let estimate: f64 = client
        .query_one(
            "SELECT GREATEST(reltuples, 0)::float8 FROM pg_class WHERE oid = $1::text::regclass",
            &[quoted],
        )
        .await
        .map_err(|e| classify_pg(format!("cannot read {qualified}"), e))?
        .get(0);
    Ok(Ok(TablePlan {
        topic: rules.topic.clone(),
        qualified: qualified.clone(),
        columns,
        key,
        not_compared,
        from: if relkind == "p" {
            quoted.clone()
        } else {
            format!("ONLY {quoted}")
        },
        filter: rules.filter.clone(),
        buckets: bucket_count(estimate),
    }))
}

/// Every row's bucket and hash, computed by the server, summed per bucket; at most
/// `rate` rows a second (0: unbounded).
///
/// # Errors
///
/// Queries failed.
pub async fn checksums(
    client: &Client,
    plan: &TablePlan,
    events: &EventOptions,
    rate: u64,
) -> Result<Buckets, PipelineError> {
    let key_form = form_sql(&TablePlan::pairs(&plan.key), events);
    let row_form = form_sql(&TablePlan::pairs(&plan.columns), events);
    let query = format!(
        "SELECT {}, {} FROM {} AS t{}",
        bucket_sql(&key_form, plan.buckets),
        hash_sql(&row_form),
        plan.from,
        plan.where_clause(None)
    );
    let mut buckets: Buckets = vec![(0, 0); plan.buckets as usize];
    scan(client, &query, &plan.qualified, rate, |row| {
        let bucket: i32 = row.get(0);
        let hash: i64 = row.get(1);
        if let Some(entry) = buckets.get_mut(bucket as usize) {
            entry.0 += 1;
            entry.1 += i128::from(hash);
        }
    })
    .await?;
    Ok(buckets)
}

/// The rows of `buckets` (sorted), with their canonical texts.
///
/// # Errors
///
/// Queries failed.
pub async fn rows(
    client: &Client,
    plan: &TablePlan,
    events: &EventOptions,
    buckets: &[u32],
    rate: u64,
) -> Result<Vec<SourceRow>, PipelineError> {
    let key_form = form_sql(&TablePlan::pairs(&plan.key), events);
    let bucket = bucket_sql(&key_form, plan.buckets);
    let list: Vec<String> = buckets.iter().map(u32::to_string).collect();
    let array = |columns: &[Column]| {
        let items: Vec<String> = columns
            .iter()
            .map(|c| c.class.sql(&c.name, events))
            .collect();
        format!("ARRAY[{}]::text[]", items.join(", "))
    };
    let key_text: Vec<String> = plan
        .key
        .iter()
        .map(|c| crate::sql::pg_text_output(&format!("t.{}", quote_ident(&c.name))))
        .collect();
    let query = format!(
        "SELECT {bucket}, {}, ARRAY[{}]::text[], {}, to_jsonb(t)::text FROM {} AS t{}",
        array(&plan.key),
        key_text.join(", "),
        array(&plan.columns),
        plan.from,
        plan.where_clause(Some(&format!("{bucket} IN ({})", list.join(", "))))
    );
    let mut rows = Vec::new();
    scan(client, &query, &plan.qualified, rate, |row| {
        let bucket: i32 = row.get(0);
        let json: String = row.get(4);
        rows.push(SourceRow {
            bucket: bucket as u32,
            key: row.get(1),
            key_text: row.get(2),
            values: row.get(3),
            json: serde_json::from_str(&json).unwrap_or_default(),
        });
    })
    .await?;
    Ok(rows)
}

/// Runs `query` through a cursor, `FETCH`ing at the pace `rate` allows.
async fn scan(
    client: &Client,
    query: &str,
    table: &str,
    rate: u64,
    mut each: impl FnMut(&tokio_postgres::Row),
) -> Result<(), PipelineError> {
    client
        .batch_execute(&format!(
            "DECLARE sluice_verify NO SCROLL CURSOR FOR {query}"
        ))
        .await
        .map_err(|e| classify_pg(format!("cannot read {table}"), e))?;
    let fetch = if rate == 0 {
        FETCH_ROWS
    } else {
        (rate / 10).clamp(100, FETCH_ROWS)
    };
    let started = Instant::now();
    let mut total = 0u64;
    loop {
        let rows = client
            .query(&format!("FETCH {fetch} FROM sluice_verify"), &[])
            .await
            .map_err(|e| classify_pg(format!("cannot read {table}"), e))?;
        rows.iter().for_each(&mut each);
        total += rows.len() as u64;
        if (rows.len() as u64) < fetch {
            break;
        }
        if rate > 0 {
            let due = Duration::from_secs_f64(total as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    client
        .batch_execute("CLOSE sluice_verify")
        .await
        .map_err(|e| classify_pg(format!("cannot read {table}"), e))?;
    Ok(())
}

/// About 1,000 rows a bucket (by the table's size estimate), 1 to 65,536 buckets.
pub(super) fn bucket_count(estimate: f64) -> u32 {
    ((estimate / 1000.0).ceil() as u32).clamp(1, 65_536)
}

#[cfg(test)]
impl TablePlan {
    /// A plan of `columns` whose first `key_len` are the key.
    pub(crate) fn for_tests(columns: Vec<Column>, key_len: usize, buckets: u32) -> Self {
        Self {
            qualified: "public.t".into(),
            topic: "app.public.t".into(),
            key: columns[..key_len].to_vec(),
            columns,
            not_compared: Vec::new(),
            from: "ONLY public.t".into(),
            filter: None,
            buckets,
        }
    }
}
