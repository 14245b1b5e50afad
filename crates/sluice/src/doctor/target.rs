//! What `sluice doctor` looks at, and how its checks read a PostgreSQL server's settings (the
//! PostgreSQL checks of [`super`], `failover` and `versions` share them).

use std::collections::BTreeMap;

use tokio_postgres::Client;

use crate::source::postgres::config::PgPipelineConfig;

/// Where to look.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The pipeline, when a file was given.
    pub pipeline: Option<PgPipelineConfig>,
    /// PostgreSQL URL (from the pipeline, `--pg-url` or `PG_URL`).
    pub pg_url: Option<String>,
    /// Kafka bootstrap servers (from the pipeline, `--brokers` or `KAFKA_BROKERS`).
    pub brokers: Option<String>,
    /// `[kafka.client]` of a pipeline that is not a PostgreSQL one (security settings).
    pub kafka_client: Option<BTreeMap<String, String>>,
    /// Read the running pipeline's `/health` (its last scheduled verification): `sluice
    /// doctor`, not the pipeline's own admin API (which holds it already).
    pub read_health: bool,
    /// How long a transaction that wrote (or a prepared one) may stay open before
    /// `pg.open_transactions` names it (`sluice doctor --long-transaction-s`); `None`:
    /// [`LONG_TRANSACTION`].
    pub long_transaction: Option<std::time::Duration>,
}

/// `pg.open_transactions`'s default threshold.
pub const LONG_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(300);

pub(super) async fn setting(client: &Client, name: &str) -> Result<String, tokio_postgres::Error> {
    Ok(client
        .query_one("SELECT current_setting($1)", &[&name])
        .await?
        .get(0))
}

/// A setting in its base unit (ms, kB, …) as `pg_settings` reports it.
pub(super) async fn setting_number(
    client: &Client,
    name: &str,
) -> Result<i64, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT setting::bigint FROM pg_settings WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.get(0))
}
