//! `sluice import debezium`: a Debezium connector's configuration, as Kafka Connect holds it,
//! turned into the sluice pipeline file that behaves the same, with every setting that cannot
//! be carried over listed with the reason; with `--offsets`, the connector's committed source
//! offset read and checked against the server so that the first `sluice run` continues where
//! Debezium stopped, without a snapshot (docs/migrating-from-debezium.md).
//!
//! - [`connector`]: reading the configuration (JSON of the REST API, `.properties`);
//! - [`common`]: the settings both connectors share and Connect's own (converters, transforms,
//!   topic creation); [`postgres`] and [`mysql`]: each connector's table of settings;
//! - [`regex_glob`]: Debezium's regex lists as sluice's globs;
//! - [`document`]: the pipeline file written;
//! - [`offsets`]: the Connect offsets topic (or a dump of it) and the offsets in it;
//! - [`takeover`]: the checks against the server before a takeover.

pub mod check;
pub mod common;
pub mod connector;
pub mod document;
pub mod mysql;
pub mod mysql_takeover;
pub mod offsets;
pub mod postgres;
pub mod regex_glob;
pub mod session;
pub mod takeover;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

use self::connector::{ConnectorConfig, ConnectorKind, provider_reference};
pub use self::session::{Finding, Import, Imported, Outcome};

/// `sluice import …`.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// A Debezium PostgreSQL or MySQL connector's configuration as the sluice pipeline file
    /// that behaves the same. Exit code: 0 = written; 2 = a setting that changes what
    /// consumers see could not be carried over (nothing written; see --accept) or a takeover
    /// check failed; 1 = the input could not be read.
    Debezium(DebeziumArgs),
}

/// `sluice import debezium` arguments.
#[derive(Debug, Args)]
pub struct DebeziumArgs {
    /// The connector's configuration: the JSON of `GET /connectors/<name>/config` (or
    /// `{"name":…,"config":{…}}`), or a `.properties` file.
    pub config: PathBuf,
    /// Where to write the pipeline file (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Continue from the connector's committed offset: `kafka:<offsets topic>` (Connect's
    /// `offset.storage.topic`, read with --brokers) or a file dumped from it (`key<TAB>value`
    /// lines as kafka-console-consumer prints with print.key=true, or JSON lines
    /// `{"key":…,"value":…}`). The takeover's preconditions are checked against the server;
    /// nothing is written when one fails.
    #[arg(long)]
    pub offsets: Option<String>,
    /// Kafka bootstrap servers to read `--offsets kafka:<topic>` from.
    #[arg(long, env = "KAFKA_BROKERS")]
    pub brokers: Option<String>,
    /// Accept that this setting is not carried over although it changes what consumers see
    /// (repeat for several).
    #[arg(long, value_name = "SETTING")]
    pub accept: Vec<String>,
    /// Accept every setting that is not carried over.
    #[arg(long)]
    pub accept_all: bool,
}

/// Maps a connector configuration (no server is asked).
///
/// # Errors
///
/// Not a Debezium PostgreSQL or MySQL connector.
pub fn import(connector: &ConnectorConfig) -> anyhow::Result<Imported> {
    let kind = connector.kind();
    let mut import = match kind {
        ConnectorKind::Postgres => Import::new(connector, "source.postgres"),
        ConnectorKind::Mysql => Import::new(connector, "source.mysql"),
        ConnectorKind::Other(ref class) if class.is_empty() => {
            bail!(
                "connector.class is missing: expected io.debezium.connector.postgresql.PostgresConnector or io.debezium.connector.mysql.MySqlConnector"
            )
        }
        ConnectorKind::Other(ref class) => bail!(
            "connector.class {class:?} is not one sluice imports: expected io.debezium.connector.postgresql.PostgresConnector or io.debezium.connector.mysql.MySqlConnector"
        ),
    };
    let name = pipeline_name(connector);
    import.doc.set("", "name", name.clone(), None);
    common::begin(&mut import);
    let keys: Vec<String> = connector.settings.keys().cloned().collect();
    for key in &keys {
        let value = connector.get(key).unwrap_or_default();
        if let Some(reference) = provider_reference(value)
            && !common::takes_provider_reference(key)
        {
            import.dropped(
                key,
                format!("holds the Connect config provider reference {reference}, which only Connect resolves: put the value (or a sluice ${{ENV}} / ${{file:PATH}} reference) in the pipeline file"),
                true,
            );
            continue;
        }
        let handled = match kind {
            ConnectorKind::Postgres => postgres::setting(&mut import, key, value),
            ConnectorKind::Mysql => mysql::setting(&mut import, key, value),
            ConnectorKind::Other(_) => false,
        } || common::setting(&mut import, key, value);
        if !handled {
            import.dropped(
                key,
                "a setting sluice does not know: check what it does before accepting it",
                true,
            );
        }
    }
    match kind {
        ConnectorKind::Postgres => postgres::finish(&mut import),
        ConnectorKind::Mysql => mysql::finish(&mut import),
        ConnectorKind::Other(_) => {}
    }
    common::finish(&mut import);
    let header = header(&import, &name);
    let text = import.doc.render(&header);
    Ok(Imported {
        name,
        kind,
        text,
        findings: import.findings,
        env: import.env,
    })
}

/// The pipeline's name: the connector's, made a valid sluice name (letters, digits, `_`).
fn pipeline_name(connector: &ConnectorConfig) -> String {
    let raw = connector
        .name
        .clone()
        .or_else(|| connector.get("topic.prefix").map(str::to_owned))
        .unwrap_or_else(|| "debezium".to_owned());
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "debezium".to_owned()
    } else {
        name
    }
}

fn header(import: &Import<'_>, name: &str) -> String {
    let mut text = format!(
        "Made by `sluice import debezium` from the connector {:?} ({}).\n",
        import.connector.name.as_deref().unwrap_or(name),
        import.connector.get("connector.class").unwrap_or_default()
    );
    if !import.env.is_empty() {
        text.push_str("Set before running:\n");
        for (var, what) in &import.env {
            text.push_str(&format!("  {var}: {what}\n"));
        }
    }
    let dropped: Vec<&Finding> = import
        .findings
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Dropped { .. }))
        .collect();
    if !dropped.is_empty() {
        text.push_str("Not carried over:\n");
        for finding in dropped {
            if let Outcome::Dropped {
                reason,
                changes_output,
            } = &finding.outcome
            {
                let mark = if *changes_output {
                    " [changes what consumers see]"
                } else {
                    ""
                };
                text.push_str(&format!("  {}: {reason}{mark}\n", finding.setting));
            }
        }
    }
    text
}

/// The report printed to standard error.
pub fn render_report(imported: &Imported, accept: &[String], accept_all: bool) -> String {
    let mut out = String::new();
    let carried: Vec<&str> = imported
        .findings
        .iter()
        .filter(|f| f.outcome == Outcome::Carried)
        .map(|f| f.setting.as_str())
        .collect();
    out.push_str(&format!(
        "carried over ({}): {}\n",
        carried.len(),
        carried.join(", ")
    ));
    let noted: Vec<&Finding> = imported
        .findings
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Noted(_)))
        .collect();
    if !noted.is_empty() {
        out.push_str("carried over with a note:\n");
        for f in noted {
            if let Outcome::Noted(note) = &f.outcome {
                out.push_str(&format!("  {}: {note}\n", f.setting));
            }
        }
    }
    let dropped: Vec<&Finding> = imported
        .findings
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Dropped { .. }))
        .collect();
    if !dropped.is_empty() {
        out.push_str("not carried over:\n");
        for f in dropped {
            if let Outcome::Dropped {
                reason,
                changes_output,
            } = &f.outcome
            {
                let mark = if !changes_output {
                    ""
                } else if accept_all || accept.contains(&f.setting) {
                    " [changes what consumers see: accepted]"
                } else {
                    " [changes what consumers see]"
                };
                out.push_str(&format!("  {}: {reason}{mark}\n", f.setting));
            }
        }
    }
    if !imported.env.is_empty() {
        out.push_str("set before `sluice run`:\n");
        for (var, what) in &imported.env {
            out.push_str(&format!("  {var}: {what}\n"));
        }
    }
    out
}

/// Runs `sluice import debezium`.
///
/// # Errors
///
/// The input cannot be read, or the offsets cannot be.
pub fn run(command: ImportCommand) -> anyhow::Result<ExitCode> {
    let ImportCommand::Debezium(args) = command;
    let connector = ConnectorConfig::load(&args.config)?;
    let imported = import(&connector)?;
    eprint!(
        "{}",
        render_report(&imported, &args.accept, args.accept_all)
    );
    let refused = imported.refused(&args.accept, args.accept_all);
    if !refused.is_empty() {
        let names: Vec<&str> = refused.iter().map(|f| f.setting.as_str()).collect();
        eprintln!(
            "nothing written: {} not carried over and {} what consumers see; accept with {} (or --accept-all) once you have checked",
            names.join(", "),
            if names.len() == 1 {
                "changes"
            } else {
                "change"
            },
            names
                .iter()
                .map(|n| format!("--accept {n}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        return Ok(ExitCode::from(2));
    }
    if let Some(source) = &args.offsets {
        let passed = takeover::prepare(&connector, &imported, source, args.brokers.as_deref())?;
        if !passed {
            eprintln!("nothing written: a takeover check failed (above)");
            return Ok(ExitCode::from(2));
        }
    }
    match &args.output {
        Some(path) => {
            std::fs::write(path, &imported.text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{}", imported.text),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests;
