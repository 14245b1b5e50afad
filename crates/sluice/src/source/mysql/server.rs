//! The server side: connections, the settings a binlog reader needs (checked with the fix
//! named), binlog positions (GTID sets on MySQL and MariaDB, file:position otherwise) and the
//! binlog dump request.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, OptsBuilder};
use serde::{Deserialize, Serialize};

use super::config::{MysqlSourceConfig, redact_url};
use crate::error::PipelineError;

/// Which server: they differ in GTIDs and in how a replica asks for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// Oracle MySQL (8.0).
    Mysql,
    /// MariaDB (10.x, 11.x).
    Mariadb,
}

/// How long a connection attempt (TCP, TLS and the handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP keepalive on every connection: a server that vanished (a failover, a cut network) is
/// noticed by the kernel within about a minute instead of the system default of ~2 hours.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// Opens a SQL connection to the source, within [`CONNECT_TIMEOUT`] and with TCP keepalives.
///
/// # Errors
///
/// Retryable when the server cannot be reached (or does not answer in time); fatal for an
/// invalid URL.
pub async fn connect(source: &MysqlSourceConfig) -> Result<Conn, PipelineError> {
    let opts = Opts::from_url(&source.url).map_err(|e| {
        PipelineError::fatal_with(
            "source.mysql.url is invalid",
            "expected mysql://user:password@host:port",
            e,
        )
    })?;
    // The URL's TLS options (verify_ca, verify_identity) are kept; the CA file is added.
    let ssl = source.ssl_ca.as_ref().map(|ca| {
        opts.ssl_opts()
            .cloned()
            .unwrap_or_default()
            .with_root_certs(vec![ca.clone().into()])
    });
    let mut opts = OptsBuilder::from_opts(opts).tcp_keepalive(Some(TCP_KEEPALIVE));
    if ssl.is_some() {
        opts = opts.ssl_opts(ssl);
    }
    let what = || format!("cannot connect to {}", redact_url(&source.url));
    match tokio::time::timeout(CONNECT_TIMEOUT, Conn::new(opts)).await {
        Ok(connected) => connected.map_err(|e| classify_connect(what(), source, e)),
        Err(elapsed) => Err(PipelineError::retryable(
            format!("{}: no answer within {CONNECT_TIMEOUT:?}", what()),
            elapsed,
        )),
    }
}

/// A server certificate the TLS handshake refused is for an operator to fix (a retry meets the
/// same certificate): fatal, naming `ssl_ca`. Anything else is retried.
fn classify_connect(
    what: String,
    source: &MysqlSourceConfig,
    error: mysql_async::Error,
) -> PipelineError {
    if !matches!(
        crate::crypto::find_rustls_error(&error),
        Some(rustls::Error::InvalidCertificate(_))
    ) {
        return PipelineError::retryable(what, error);
    }
    let against = match &source.ssl_ca {
        Some(ca) => format!("source.mysql.ssl_ca ({})", ca.display()),
        None => "the system's roots".to_owned(),
    };
    PipelineError::fatal_with(
        what,
        format!(
            "the server's TLS certificate does not verify against {against}: set \
             source.mysql.ssl_ca to the PEM file of the CA that signed it (or add \
             verify_ca=false to the URL to skip the check)"
        ),
        error,
    )
}

/// Runs `query` within `deadline`: a server that stops answering mid-query fails it (retryable)
/// instead of holding the caller — the delivery loop's checkpoints and silence check — forever.
///
/// # Errors
///
/// The query's own error, or a retryable one naming `what` when the deadline passes.
pub async fn bounded<T>(
    what: &str,
    deadline: Duration,
    query: impl std::future::Future<Output = Result<T, PipelineError>>,
) -> Result<T, PipelineError> {
    match tokio::time::timeout(deadline, query).await {
        Ok(result) => result,
        Err(elapsed) => Err(PipelineError::retryable(
            format!("{what}: no answer from the server within {deadline:?}"),
            elapsed,
        )),
    }
}

/// A query's error as a retryable pipeline error.
pub fn sql_error(what: &str) -> impl FnOnce(mysql_async::Error) -> PipelineError + '_ {
    move |e| PipelineError::retryable(what.to_owned(), e)
}

/// The server's flavor, from its version string.
///
/// # Errors
///
/// When the query fails.
pub async fn flavor(conn: &mut Conn) -> Result<Flavor, PipelineError> {
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(sql_error("SELECT VERSION() failed"))?;
    Ok(if version.unwrap_or_default().contains("MariaDB") {
        Flavor::Mariadb
    } else {
        Flavor::Mysql
    })
}

/// One required setting or privilege that is wrong, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingIssue {
    /// The setting (`binlog_format`) or `privileges`.
    pub setting: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// Checks the server settings and privileges a binlog reader with `source`'s configuration
/// needs; every wrong one, with the fix.
///
/// # Errors
///
/// When the queries fail.
pub async fn check_settings(
    conn: &mut Conn,
    flavor: Flavor,
    source: &MysqlSourceConfig,
) -> Result<Vec<SettingIssue>, PipelineError> {
    let variables: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', \
             'binlog_row_image', 'binlog_row_metadata', 'binlog_row_value_options', 'gtid_mode', \
             'log_bin_compress')",
        )
        .await
        .map_err(sql_error("SHOW GLOBAL VARIABLES failed"))?;
    let grants: Vec<String> = conn
        .query("SHOW GRANTS FOR CURRENT_USER()")
        .await
        .map_err(sql_error("SHOW GRANTS failed"))?;
    let snapshots = source.snapshot != crate::config::SnapshotMode::Never;
    Ok(settings_issues(flavor, variables, &grants, snapshots))
}

/// The wrong settings and missing privileges among the server's `variables` and the user's
/// `grants` (as `SHOW GRANTS` prints them), each with the fix. With `snapshots`, MySQL also
/// needs `RELOAD` or `LOCK TABLES` (to stop commits while the snapshot opens; MariaDB needs
/// no lock).
pub fn settings_issues(
    flavor: Flavor,
    variables: Vec<(String, String)>,
    grants: &[String],
    snapshots: bool,
) -> Vec<SettingIssue> {
    let vars: BTreeMap<String, String> = variables
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let get = |name: &str| vars.get(name).map(String::as_str);
    let mut issues = Vec::new();
    let mut issue = |setting: &str, problem: String| {
        issues.push(SettingIssue {
            setting: setting.to_owned(),
            problem,
        });
    };
    let config_file = match flavor {
        Flavor::Mysql => "my.cnf [mysqld]",
        Flavor::Mariadb => "my.cnf [mariadbd]",
    };
    if !get("log_bin").is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1") {
        issue(
            "log_bin",
            format!(
                "the binary log is off: start the server with log_bin (e.g. log_bin = binlog in {config_file}) and restart it"
            ),
        );
    }
    for (name, wanted, fix) in [
        ("binlog_format", "ROW", "SET GLOBAL binlog_format = 'ROW'"),
        (
            "binlog_row_image",
            "FULL",
            "SET GLOBAL binlog_row_image = 'FULL'",
        ),
        (
            "binlog_row_metadata",
            "FULL",
            "SET GLOBAL binlog_row_metadata = 'FULL' (without it the binlog has no column names and no signedness, and values decode wrong)",
        ),
    ] {
        match get(name) {
            Some(value) if value.eq_ignore_ascii_case(wanted) => {}
            Some(value) => issue(
                name,
                format!(
                    "is {value}, must be {wanted}: {fix}, and set it in {config_file} so it survives a restart"
                ),
            ),
            None => issue(
                name,
                format!(
                    "not supported by this server version: sluice needs {name} = {wanted} (MySQL 8.0.1+, MariaDB 10.5+)"
                ),
            ),
        }
    }
    if let Some(value) = get("binlog_row_value_options")
        && !value.is_empty()
    {
        issue(
            "binlog_row_value_options",
            format!(
                "is {value}, must be empty (partial JSON updates leave whole values out of the binlog): SET GLOBAL binlog_row_value_options = ''"
            ),
        );
    }
    if get("log_bin_compress").is_some_and(|v| v.eq_ignore_ascii_case("ON")) {
        issue(
            "log_bin_compress",
            "is ON: sluice does not read compressed binlog events yet: SET GLOBAL log_bin_compress = OFF".into(),
        );
    }
    if flavor == Flavor::Mysql
        && let Some(mode) = get("gtid_mode")
        && !matches!(mode.to_ascii_uppercase().as_str(), "ON" | "OFF")
    {
        issue(
            "gtid_mode",
            format!(
                "is {mode} (a transition state): finish it (ON, or OFF for file:position checkpoints)"
            ),
        );
    }
    let global: Vec<String> = grants
        .iter()
        .map(|g| g.to_ascii_uppercase())
        .filter(|g| g.contains(" ON *.* "))
        .collect();
    let has = |privilege: &str| {
        global
            .iter()
            .any(|g| g.contains("ALL PRIVILEGES") || g.contains(privilege))
    };
    let mut missing: Vec<&str> = Vec::new();
    if !has("REPLICATION SLAVE") && !has("REPLICATION REPLICA") {
        missing.push("REPLICATION SLAVE");
    }
    let monitor = match flavor {
        Flavor::Mysql => "REPLICATION CLIENT",
        Flavor::Mariadb => "BINLOG MONITOR",
    };
    if !has("REPLICATION CLIENT") && !has("BINLOG MONITOR") {
        missing.push(monitor);
    }
    if !has("SELECT") {
        missing.push("SELECT");
    }
    if snapshots && flavor == Flavor::Mysql && !has("RELOAD") && !has("LOCK TABLES") {
        // FLUSH TABLES WITH READ LOCK (or, without RELOAD, LOCK TABLES … READ) while the
        // snapshot's transactions open.
        missing.push("RELOAD");
    }
    if !missing.is_empty() {
        issue(
            "privileges",
            format!(
                "the user lacks {}: GRANT {} ON *.* TO <user>",
                missing.join(", "),
                missing.join(", ")
            ),
        );
    }
    issues
}

/// What incremental snapshots need of a pipeline with a signal table, for `sluice check` and
/// `doctor` (not checked at start: without them, requests are refused in the log): `INSERT`
/// and `DELETE` on the signal table (the watermarks), and on MySQL `binlog_order_commits = ON`
/// (see [`super::incremental`]).
///
/// # Errors
///
/// When the queries fail.
pub async fn signal_table_issues(
    conn: &mut Conn,
    flavor: Flavor,
    source: &MysqlSourceConfig,
) -> Result<Vec<SettingIssue>, PipelineError> {
    let Some((database, table)) = source
        .signal_table
        .as_deref()
        .and_then(crate::config::parse_table_name)
    else {
        return Ok(Vec::new());
    };
    let grants: Vec<String> = conn
        .query("SHOW GRANTS FOR CURRENT_USER()")
        .await
        .map_err(sql_error("SHOW GRANTS failed"))?;
    let mut issues: Vec<SettingIssue> = signal_table_privileges(&grants, database, table)
        .into_iter()
        .collect();
    if flavor == Flavor::Mysql {
        let ordered: Option<i64> = conn
            .query_first("SELECT @@GLOBAL.binlog_order_commits")
            .await
            .map_err(sql_error("SELECT @@GLOBAL.binlog_order_commits failed"))?;
        if ordered == Some(0) {
            issues.push(SettingIssue {
                setting: "binlog_order_commits".into(),
                problem: "is OFF: incremental snapshots are refused (transactions may become visible out of binlog order): SET GLOBAL binlog_order_commits = ON (the default)".into(),
            });
        }
    }
    Ok(issues)
}

/// Whether `grants` (as `SHOW GRANTS` prints them) let the user write watermarks into the
/// signal table `database.table` (`INSERT` and `DELETE` on it, its database or `*.*`); the
/// issue with the fix when not.
pub fn signal_table_privileges(
    grants: &[String],
    database: &str,
    table: &str,
) -> Option<SettingIssue> {
    let covers = |object: &str| {
        let object = object.replace(['`', '\\'], "");
        object == "*.*"
            || object == format!("{database}.*")
            || object == format!("{database}.{table}")
    };
    let mut held: Vec<String> = Vec::new();
    for grant in grants {
        let Some(rest) = grant.strip_prefix("GRANT ") else {
            continue;
        };
        let Some((privileges, rest)) = rest.split_once(" ON ") else {
            continue;
        };
        let object = rest.split(" TO ").next().unwrap_or_default().trim();
        if !covers(object) {
            continue;
        }
        held.extend(privileges.split(',').map(|p| p.trim().to_ascii_uppercase()));
    }
    let all = held.iter().any(|p| p == "ALL PRIVILEGES" || p == "ALL");
    let missing: Vec<&str> = ["INSERT", "DELETE"]
        .into_iter()
        .filter(|p| !all && !held.iter().any(|h| h == p))
        .collect();
    (!missing.is_empty()).then(|| SettingIssue {
        setting: "privileges".into(),
        problem: format!(
            "the user lacks {} on the signal table {database}.{table} (incremental snapshots write their watermarks there): GRANT {} ON `{database}`.`{table}` TO <user>",
            missing.join(", "),
            missing.join(", "),
        ),
    })
}

/// The issues as one fatal error (or nothing).
pub fn settings_error(issues: &[SettingIssue]) -> Option<PipelineError> {
    (!issues.is_empty()).then(|| {
        let text = issues
            .iter()
            .map(|i| format!("{}: {}", i.setting, i.problem))
            .collect::<Vec<_>>()
            .join("; ");
        PipelineError::fatal(
            format!("the server is not set up for binlog capture: {text}"),
            "fix the settings named (see `sluice check`), then start again",
        )
    })
}

/// A committed transaction's place in the run (1, 2, …), the delivery core's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct BinlogSeq(pub u64);

impl std::fmt::Display for BinlogSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transaction #{}", self.0)
    }
}

impl crate::delivery::Position for BinlogSeq {
    fn gauge(&self) -> f64 {
        self.0 as f64
    }
}

/// A binlog position a run starts from: a GTID set where the server has them (resuming by
/// GTID survives binlog file renames and failovers), and always the file and position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinlogPosition {
    /// Binlog file name.
    pub file: String,
    /// Offset in it: the next event to read.
    pub pos: u64,
    /// Every transaction before the position: MySQL's `uuid:1-5,…`, MariaDB's
    /// `domain-server-seq,…`; `None` without GTIDs (file:position only).
    pub gtid_set: Option<String>,
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)?;
        if let Some(set) = &self.gtid_set {
            write!(f, " (GTIDs {set})")?;
        }
        Ok(())
    }
}

/// The server's current position (where a pipeline without state starts).
///
/// # Errors
///
/// When the queries fail or the binary log is off.
pub async fn current_position(
    conn: &mut Conn,
    flavor: Flavor,
) -> Result<BinlogPosition, PipelineError> {
    let status: Option<mysql_async::Row> = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .map_err(sql_error("SHOW MASTER STATUS failed"))?;
    let Some(status) = status else {
        return Err(PipelineError::fatal(
            "SHOW MASTER STATUS shows no binary log",
            "start the server with log_bin",
        ));
    };
    let file: String = status.get(0).unwrap_or_default();
    let pos: u64 = status.get(1).unwrap_or(4);
    let gtid_set = match flavor {
        Flavor::Mysql => {
            let mode: Option<String> = conn
                .query_first("SELECT @@GLOBAL.gtid_mode")
                .await
                .map_err(sql_error("SELECT @@GLOBAL.gtid_mode failed"))?;
            if mode.is_some_and(|m| m.eq_ignore_ascii_case("ON")) {
                let set: Option<String> =
                    conn.query_first("SELECT @@GLOBAL.gtid_executed")
                        .await
                        .map_err(sql_error("SELECT @@GLOBAL.gtid_executed failed"))?;
                Some(MysqlGtidSet::parse(&set.unwrap_or_default())?.to_string())
            } else {
                None
            }
        }
        Flavor::Mariadb => {
            let set: Option<String> = conn
                .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
                .await
                .map_err(sql_error("SELECT @@GLOBAL.gtid_binlog_pos failed"))?;
            Some(MariadbGtidPos::parse(&set.unwrap_or_default())?.to_string())
        }
    };
    Ok(BinlogPosition {
        file,
        pos,
        gtid_set,
    })
}

/// Starts the binlog dump at `from` on `conn` (which it consumes), as replica `server_id`,
/// with heartbeats every `heartbeat_ms` (0: none).
///
/// # Errors
///
/// When the session settings cannot be made or the request is refused.
pub async fn start_dump(
    mut conn: Conn,
    flavor: Flavor,
    server_id: u32,
    from: &BinlogPosition,
    heartbeat_ms: u64,
) -> Result<BinlogStream, PipelineError> {
    if heartbeat_ms > 0 {
        // Nanoseconds; both servers send HEARTBEAT events on an idle stream.
        conn.query_drop(format!(
            "SET @master_heartbeat_period = {}",
            heartbeat_ms.saturating_mul(1_000_000)
        ))
        .await
        .map_err(sql_error("SET @master_heartbeat_period failed"))?;
    }
    let request = BinlogStreamRequest::new(server_id);
    let request = match (flavor, &from.gtid_set) {
        (Flavor::Mysql, Some(set)) => {
            let set = MysqlGtidSet::parse(set)?;
            request.with_gtid().with_gtid_set(set.sids()?)
        }
        (Flavor::Mariadb, Some(set)) => {
            // MariaDB's replica protocol: capability 4 (MARIA_SLAVE_CAPABILITY_GTID) makes the
            // server send its GTID events, and `@slave_connect_state` makes it start after the
            // given GTID position (the file and position of the dump request are then ignored).
            conn.query_drop("SET @mariadb_slave_capability = 4")
                .await
                .map_err(sql_error("SET @mariadb_slave_capability failed"))?;
            conn.exec_drop("SET @slave_connect_state = ?", (set.as_str(),))
                .await
                .map_err(sql_error("SET @slave_connect_state failed"))?;
            conn.query_drop("SET @slave_gtid_strict_mode = 0, @slave_gtid_ignore_duplicates = 0")
                .await
                .map_err(sql_error("SET @slave_gtid_strict_mode failed"))?;
            request.with_pos(4u64)
        }
        (_, None) => {
            if flavor == Flavor::Mariadb {
                conn.query_drop("SET @mariadb_slave_capability = 4")
                    .await
                    .map_err(sql_error("SET @mariadb_slave_capability failed"))?;
            }
            request
                .with_filename(from.file.as_bytes())
                .with_pos(from.pos)
        }
    };
    conn.get_binlog_stream(request).await.map_err(|e| {
        PipelineError::retryable(format!("the binlog dump from {from} was refused"), e)
    })
}

/// A MySQL GTID set: per server UUID, the sorted, disjoint transaction number ranges
/// (inclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MysqlGtidSet {
    ranges: BTreeMap<String, Vec<(u64, u64)>>,
}

impl MysqlGtidSet {
    /// Parses `uuid:1-5:7,uuid:1-3` (whitespace ignored, empty is the empty set).
    ///
    /// # Errors
    ///
    /// A fatal error naming the text when it is not a GTID set.
    pub fn parse(text: &str) -> Result<Self, PipelineError> {
        let bad = || {
            PipelineError::fatal(
                format!("{text:?} is not a MySQL GTID set"),
                "expected uuid:1-5[:7…][,uuid:…]; if it came from the state file, remove the file to start from the server's current position",
            )
        };
        let mut set = Self::default();
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        for part in compact.split(',').filter(|p| !p.is_empty()) {
            let mut pieces = part.split(':');
            let uuid = pieces.next().ok_or_else(bad)?.to_ascii_lowercase();
            if uuid.len() != 36 {
                return Err(bad());
            }
            for interval in pieces {
                let (start, end) = match interval.split_once('-') {
                    Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
                    None => {
                        let n: u64 = interval.parse().map_err(|_| bad())?;
                        (n, n)
                    }
                };
                if start == 0 || end < start {
                    return Err(bad());
                }
                let ranges = set.ranges.entry(uuid.clone()).or_default();
                ranges.push((start, end));
                normalize(ranges);
            }
        }
        Ok(set)
    }

    /// Adds transaction `gno` of server `uuid`.
    pub fn add(&mut self, uuid: &str, gno: u64) {
        let ranges = self.ranges.entry(uuid.to_owned()).or_default();
        ranges.push((gno, gno));
        normalize(ranges);
    }

    /// The set as the dump request takes it.
    fn sids(&self) -> Result<Vec<mysql_async::Sid<'static>>, PipelineError> {
        let text = self.to_string();
        text.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.parse::<mysql_async::Sid<'static>>().map_err(|e| {
                    PipelineError::fatal_with(
                        format!("cannot use the GTID set {p}"),
                        "remove the state file to start from the server's current position",
                        e,
                    )
                })
            })
            .collect()
    }
}

/// Sorts and merges overlapping or adjacent ranges.
fn normalize(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    *ranges = merged;
}

impl fmt::Display for MysqlGtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (uuid, ranges) in &self.ranges {
            if ranges.is_empty() {
                continue;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            f.write_str(uuid)?;
            for (start, end) in ranges {
                if start == end {
                    write!(f, ":{start}")?;
                } else {
                    write!(f, ":{start}-{end}")?;
                }
            }
        }
        Ok(())
    }
}

/// A MariaDB GTID position: per replication domain, the last transaction's server and
/// sequence number (`domain-server-seq,…`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MariadbGtidPos {
    domains: BTreeMap<u32, (u32, u64)>,
}

impl MariadbGtidPos {
    /// Parses `0-1-5,1-2-7` (empty is the empty position).
    ///
    /// # Errors
    ///
    /// A fatal error naming the text when it is not a GTID position.
    pub fn parse(text: &str) -> Result<Self, PipelineError> {
        let mut pos = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let gtid = MariadbGtid::parse(part).ok_or_else(|| {
                PipelineError::fatal(
                    format!("{text:?} is not a MariaDB GTID position"),
                    "expected domain-server-seq[,…]; if it came from the state file, remove the file to start from the server's current position",
                )
            })?;
            pos.add(gtid);
        }
        Ok(pos)
    }

    /// Records `gtid` as its domain's last transaction.
    pub fn add(&mut self, gtid: MariadbGtid) {
        self.domains
            .insert(gtid.domain, (gtid.server, gtid.sequence));
    }
}

impl fmt::Display for MariadbGtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (domain, (server, seq))) in self.domains.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{domain}-{server}-{seq}")?;
        }
        Ok(())
    }
}

/// One MariaDB GTID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MariadbGtid {
    /// Replication domain.
    pub domain: u32,
    /// Server that committed it.
    pub server: u32,
    /// Sequence number.
    pub sequence: u64,
}

impl MariadbGtid {
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('-');
        let gtid = Self {
            domain: parts.next()?.parse().ok()?,
            server: parts.next()?.parse().ok()?,
            sequence: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(gtid)
    }

    /// Reads MariaDB's GTID event (type 162) from its body (after the common header). The
    /// crate does not know MariaDB's event types and hands them over as unknown events, so
    /// this small, fixed layout is read here: sequence number (8 bytes), domain id (4), flags
    /// (1), little-endian; the server id is the event header's.
    pub fn from_event(body: &[u8], server: u32) -> Option<(Self, u8)> {
        let sequence = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
        let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
        let flags = *body.get(12)?;
        Some((
            Self {
                domain,
                server,
                sequence,
            },
            flags,
        ))
    }
}

impl fmt::Display for MariadbGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.sequence)
    }
}

/// A running GTID state of either flavor.
#[derive(Debug, Clone)]
pub enum GtidState {
    /// MySQL: the executed set.
    Mysql(MysqlGtidSet),
    /// MariaDB: the last transaction per domain.
    Mariadb(MariadbGtidPos),
}

impl GtidState {
    /// The state of `text` for `flavor`.
    ///
    /// # Errors
    ///
    /// When `text` is not a set of that flavor.
    pub fn parse(flavor: Flavor, text: &str) -> Result<Self, PipelineError> {
        Ok(match flavor {
            Flavor::Mysql => Self::Mysql(MysqlGtidSet::parse(text)?),
            Flavor::Mariadb => Self::Mariadb(MariadbGtidPos::parse(text)?),
        })
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mysql(set) => set.fmt(f),
            Self::Mariadb(pos) => pos.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "47e48c56-e883-11f1-acf0-02fc00000001";

    #[test]
    fn mysql_gtid_sets_parse_merge_and_print() {
        let mut set = MysqlGtidSet::parse(&format!("{A}:1-4:6,\n{}:3", A.to_uppercase())).unwrap();
        assert_eq!(set.to_string(), format!("{A}:1-4:6"));
        set.add(A, 5);
        assert_eq!(set.to_string(), format!("{A}:1-6"));
        set.add("00000000-0000-0000-0000-000000000001", 9);
        assert_eq!(
            set.to_string(),
            format!("00000000-0000-0000-0000-000000000001:9,{A}:1-6")
        );
        assert_eq!(MysqlGtidSet::parse("").unwrap().to_string(), "");
        assert!(MysqlGtidSet::parse("nope:1").is_err());
        assert_eq!(set.sids().unwrap().len(), 2);
    }

    #[test]
    fn the_signal_table_needs_insert_and_delete() {
        let grants = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
        let base = "GRANT SELECT, REPLICATION SLAVE ON *.* TO `sluice`@`%`";
        let issue = signal_table_privileges(&grants(&[base]), "shop", "sig").unwrap();
        assert!(issue.problem.contains("lacks INSERT, DELETE"), "{issue:?}");
        assert!(
            issue
                .problem
                .contains("GRANT INSERT, DELETE ON `shop`.`sig`")
        );
        for enough in [
            "GRANT INSERT, DELETE ON `shop`.* TO `sluice`@`%`",
            "GRANT CREATE, INSERT, DELETE ON `shop`.`sig` TO `sluice`@`%`",
            "GRANT ALL PRIVILEGES ON `shop`.* TO `sluice`@`%`",
            "GRANT INSERT, DELETE ON *.* TO `sluice`@`%`",
        ] {
            assert_eq!(
                signal_table_privileges(&grants(&[base, enough]), "shop", "sig"),
                None,
                "{enough}"
            );
        }
        let other = "GRANT INSERT, DELETE ON `other`.* TO `sluice`@`%`";
        assert!(signal_table_privileges(&grants(&[base, other]), "shop", "sig").is_some());
        let insert_only = "GRANT INSERT ON `shop`.* TO `sluice`@`%`";
        let issue = signal_table_privileges(&grants(&[insert_only]), "shop", "sig").unwrap();
        assert!(issue.problem.contains("lacks DELETE"), "{issue:?}");
    }

    #[test]
    fn each_wrong_setting_and_missing_privilege_is_named_with_its_fix() {
        let good = || {
            [
                ("log_bin", "ON"),
                ("binlog_format", "ROW"),
                ("binlog_row_image", "FULL"),
                ("binlog_row_metadata", "FULL"),
                ("binlog_row_value_options", ""),
                ("gtid_mode", "ON"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .to_vec()
        };
        let all = [
            "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `sluice`@`%`".to_owned(),
        ];
        assert_eq!(settings_issues(Flavor::Mysql, good(), &all, false), []);
        // Snapshots on MySQL stop commits while they open: RELOAD (or LOCK TABLES) too.
        let issues = settings_issues(Flavor::Mysql, good(), &all, true);
        assert_eq!(
            issues[0].problem,
            "the user lacks RELOAD: GRANT RELOAD ON *.* TO <user>"
        );
        let with_lock_tables = [
            "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT, LOCK TABLES ON *.* TO `u`@`%`"
                .to_owned(),
        ];
        assert_eq!(
            settings_issues(Flavor::Mysql, good(), &with_lock_tables, true),
            []
        );
        let bad: Vec<(String, String)> = [
            ("log_bin", "OFF"),
            ("binlog_format", "MIXED"),
            ("binlog_row_image", "MINIMAL"),
            ("binlog_row_value_options", "PARTIAL_JSON"),
            ("gtid_mode", "OFF_PERMISSIVE"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec();
        let only_select = [
            "GRANT SELECT ON *.* TO `u`@`%`".to_owned(),
            "GRANT ALL PRIVILEGES ON `shop`.* TO `u`@`%`".to_owned(),
        ];
        let issues = settings_issues(Flavor::Mysql, bad, &only_select, false);
        let named: Vec<&str> = issues.iter().map(|i| i.setting.as_str()).collect();
        assert_eq!(
            named,
            [
                "log_bin",
                "binlog_format",
                "binlog_row_image",
                "binlog_row_metadata",
                "binlog_row_value_options",
                "gtid_mode",
                "privileges"
            ]
        );
        assert!(
            issues[1]
                .problem
                .contains("SET GLOBAL binlog_format = 'ROW'"),
            "{issues:?}"
        );
        assert!(
            issues[3]
                .problem
                .contains("not supported by this server version"),
            "{issues:?}"
        );
        assert_eq!(
            issues[6].problem,
            "the user lacks REPLICATION SLAVE, REPLICATION CLIENT: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user>"
        );
        let all_privileges = ["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost`".to_owned()];
        let mut mariadb = good();
        mariadb.retain(|(k, _)| k != "gtid_mode" && k != "binlog_row_value_options");
        assert_eq!(
            settings_issues(Flavor::Mariadb, mariadb.clone(), &all_privileges, true),
            []
        );
        // MariaDB's snapshots take no lock.
        assert_eq!(settings_issues(Flavor::Mariadb, mariadb, &all, true), []);
    }

    #[test]
    fn mariadb_positions_keep_the_last_transaction_per_domain() {
        let mut pos = MariadbGtidPos::parse("0-1-4, 2-7-9").unwrap();
        pos.add(MariadbGtid {
            domain: 0,
            server: 1,
            sequence: 5,
        });
        assert_eq!(pos.to_string(), "0-1-5,2-7-9");
        assert!(MariadbGtidPos::parse("0-1").is_err());
        let mut body = 42u64.to_le_bytes().to_vec();
        body.extend_from_slice(&3u32.to_le_bytes());
        body.push(1);
        let (gtid, flags) = MariadbGtid::from_event(&body, 7).unwrap();
        assert_eq!((gtid.to_string(), flags), ("3-7-42".to_owned(), 1));
    }
}
