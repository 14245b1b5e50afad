//! Stored generated columns (PostgreSQL 18): captured when `source.postgres.
//! publish_generated_columns = true` asks for them, through the publication's
//! `publish_generated_columns = stored` (the snapshot reads them too).
//!
//! Off by default, as Debezium: pgoutput leaves generated columns out of its messages unless the
//! publication publishes them, and a consumer can compute them. Before 18 the server cannot
//! publish them at all, so asking for them there is refused with the key and the fix.

use super::config::PgPipelineConfig;
use super::setup::{PgCatalog, quote_ident};
use crate::error::{PipelineError, classify_pg};

/// The first major version whose publications can publish generated columns.
pub const SINCE: u32 = 18;

/// Whether the publication publishes stored generated columns, on a server of major `version`:
/// `None` before 18 (no such option).
///
/// # Errors
///
/// Fatal when the pipeline file asks for them and the server is older than 18.
pub fn wanted(config: &PgPipelineConfig, version: u32) -> Result<Option<bool>, PipelineError> {
    let want = config.source.publish_generated_columns;
    if version < SINCE {
        if want {
            return Err(PipelineError::fatal(
                format!(
                    "source.postgres.publish_generated_columns = true needs PostgreSQL {SINCE} or later (the server is {version})"
                ),
                "remove source.postgres.publish_generated_columns (or set it to false), or upgrade PostgreSQL",
            ));
        }
        return Ok(None);
    }
    Ok(Some(want))
}

/// The publication option's value.
pub fn option_value(publish: bool) -> &'static str {
    if publish { "stored" } else { "none" }
}

/// `ALTER PUBLICATION … SET (publish_generated_columns = …)`.
pub fn alter_sql(name: &str, publish: bool) -> String {
    format!(
        "ALTER PUBLICATION {} SET (publish_generated_columns = {})",
        quote_ident(name),
        option_value(publish)
    )
}

/// Brings an existing publication's `publish_generated_columns` in step with the pipeline file:
/// changed when sluice manages the publication, refused with the SQL otherwise.
///
/// # Errors
///
/// Fatal when an unmanaged publication disagrees; retryable on connection trouble.
pub async fn keep_in_step(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
    name: &str,
    want: Option<bool>,
) -> Result<(), PipelineError> {
    let Some(want) = want else {
        return Ok(());
    };
    let now: String = catalog
        .client()
        .query_one(
            "SELECT pubgencols::text FROM pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await
        .map_err(|e| classify_pg("cannot read the publication", e))?
        .get(0);
    if (now == "s") == want {
        return Ok(());
    }
    let sql = alter_sql(name, want);
    if !config.source.create_publication {
        return Err(PipelineError::fatal(
            format!(
                "publication {name:?} {} stored generated columns, but source.postgres.publish_generated_columns = {want} (and create_publication = false)",
                if want {
                    "does not publish"
                } else {
                    "publishes"
                }
            ),
            format!("run: {sql}; or set source.postgres.create_publication = true"),
        ));
    }
    catalog
        .client()
        .batch_execute(&sql)
        .await
        .map_err(|e| classify_pg(format!("cannot update publication {name:?}"), e))?;
    tracing::info!(publication = %name, publish_generated_columns = option_value(want), "updated publication to match the pipeline file");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(publish: bool) -> PgPipelineConfig {
        let text = format!(
            "name = \"p\"\n[source.postgres]\nurl = \"postgres://u@h/db\"\nschemas = [\"public\"]\npublish_generated_columns = {publish}\n[kafka]\nbrokers = \"b:9092\"\n"
        );
        PgPipelineConfig::from_toml(&text, "test.toml", &|_: &str| None).expect("valid config")
    }

    #[test]
    fn refused_before_18_with_the_key_and_the_fix() {
        let error = wanted(&config(true), 17).unwrap_err().to_string();
        assert!(
            error.contains("source.postgres.publish_generated_columns = true needs PostgreSQL 18"),
            "{error}"
        );
        assert!(error.contains("the server is 17"), "{error}");
        assert_eq!(wanted(&config(false), 17).unwrap(), None);
        assert_eq!(wanted(&config(true), 18).unwrap(), Some(true));
        assert_eq!(wanted(&config(false), 18).unwrap(), Some(false));
    }

    #[test]
    fn alter_sql_names_the_option() {
        assert_eq!(
            alter_sql("p\"x", true),
            "ALTER PUBLICATION \"p\"\"x\" SET (publish_generated_columns = stored)"
        );
    }
}
