//! Schema-change events: Debezium MySQL's schema-change topic (`<topic_prefix>`), one event per
//! DDL statement on a captured database or table, key `{"databaseName":…}`, value
//! `{"source":…,"ts_ms":…,"databaseName":…,"schemaName":null,"ddl":…,"tableChanges":[…]}`.
//!
//! sluice has no DDL parser. A streamed statement (a binlog QUERY event) is recognised by its
//! first words only ([`classify`]: `CREATE`/`ALTER`/`DROP`/`RENAME TABLE`, `CREATE`/`DROP
//! INDEX … ON`, `CREATE`/`ALTER`/`DROP DATABASE`), and the structure of a created or altered
//! table (`tableChanges[].table`) is read from `information_schema` when the event is
//! processed ([`read_table`]), not derived from the statement: when another DDL on the same
//! table has run since (sluice behind the binlog), the structure shown is the newer one, and a
//! table dropped since shows `"table":null`. During the initial snapshot the statements are
//! Debezium's synthesised ones (`SET character_set_server=…`, `DROP TABLE IF EXISTS` of every
//! captured table, per database `DROP DATABASE IF EXISTS`, `CREATE DATABASE`, `USE`, and each
//! table's `SHOW CREATE TABLE`) with the structures read under the snapshot's transaction.

use std::sync::Arc;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::config::MysqlSourceConfig;
use super::encode::{BinlogSource, HEADER_BINLOG_FILE, HEADER_BINLOG_POS};
use super::schema::JsonChecks;
use super::server::{Flavor, sql_error};
use super::snapshot::CapturedTable;
use crate::error::PipelineError;
use crate::event::{write_int, write_json_str};
use crate::kafka::OutRecord;

/// A `tableChanges[]` entry's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// `CREATE`.
    Create,
    /// `ALTER`.
    Alter,
    /// `DROP`.
    Drop,
}

impl ChangeType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Alter => "ALTER",
            Self::Drop => "DROP",
        }
    }
}

/// A recognised DDL statement: the tables it changes, or the database it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The database a database-level statement names (`CREATE DATABASE x`); the session's
    /// otherwise.
    pub database: String,
    /// The tables changed (database, table), in the statement's order; empty for a
    /// database-level statement.
    pub tables: Vec<(ChangeType, String, String)>,
}

/// Splits `sql` into words: identifiers (backquotes removed), keywords, `.`, `,` and `(`;
/// comments skipped. Enough for the first words of a DDL statement.
fn words(sql: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while out.len() < limit {
        let Some(&c) = chars.peek() else { break };
        if c.is_whitespace() {
            chars.next();
        } else if c == '/' {
            chars.next();
            if chars.peek() == Some(&'*') {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            } else {
                out.push("/".to_owned());
            }
        } else if c == '#' {
            // A line comment.
            for c in chars.by_ref() {
                if c == '\n' {
                    break;
                }
            }
        } else if c == '`' {
            chars.next();
            let mut name = String::new();
            while let Some(c) = chars.next() {
                if c == '`' {
                    if chars.peek() == Some(&'`') {
                        chars.next();
                        name.push('`');
                    } else {
                        break;
                    }
                } else {
                    name.push(c);
                }
            }
            out.push(format!("`{name}"));
        } else if c == '.' || c == ',' || c == '(' || c == ';' {
            chars.next();
            out.push(c.to_string());
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || "`.,();/".contains(c) {
                    break;
                }
                word.push(c);
                chars.next();
            }
            if word.is_empty() {
                chars.next();
            } else {
                out.push(word);
            }
        }
    }
    out
}

/// A word as a name: a backquoted identifier unquoted, a bare one as written.
fn name_of(word: &str) -> &str {
    word.strip_prefix('`').unwrap_or(word)
}

fn is_keyword(word: &str, keyword: &str) -> bool {
    !word.starts_with('`') && word.eq_ignore_ascii_case(keyword)
}

/// Reads `[db.]table` at `words[*i]`, advancing `i`.
fn qualified(words: &[String], i: &mut usize, default_db: &str) -> Option<(String, String)> {
    let first = words.get(*i)?;
    if first == "," || first == "(" || first == "." {
        return None;
    }
    *i += 1;
    if words.get(*i).map(String::as_str) == Some(".") {
        let second = words.get(*i + 1)?;
        *i += 2;
        Some((name_of(first).to_owned(), name_of(second).to_owned()))
    } else {
        Some((default_db.to_owned(), name_of(first).to_owned()))
    }
}

/// Skips `IF [NOT] EXISTS` at `words[*i]`.
fn skip_if_exists(words: &[String], i: &mut usize) {
    if words.get(*i).is_some_and(|w| is_keyword(w, "IF")) {
        *i += 1;
        if words.get(*i).is_some_and(|w| is_keyword(w, "NOT")) {
            *i += 1;
        }
        if words.get(*i).is_some_and(|w| is_keyword(w, "EXISTS")) {
            *i += 1;
        }
    }
}

/// The DDL statement `sql` run with `default_db` as the session's database, when it is one
/// sluice reports (see the module docs); `None` for anything else (DML, `TRUNCATE`, views,
/// routines, users, temporary tables, …).
pub fn classify(sql: &str, default_db: &str) -> Option<Statement> {
    let words = words(sql, 256);
    let verb = words.first()?;
    let mut i = 1;
    let kw = |i: usize, k: &str| words.get(i).is_some_and(|w| is_keyword(w, k));
    let database_level = |i: usize| -> Option<Statement> {
        let mut i = i;
        skip_if_exists(&words, &mut i);
        let name = words.get(i)?;
        Some(Statement {
            database: name_of(name).to_owned(),
            tables: Vec::new(),
        })
    };
    if is_keyword(verb, "CREATE") {
        if kw(i, "OR") && kw(i + 1, "REPLACE") {
            i += 2;
        }
        if kw(i, "DATABASE") || kw(i, "SCHEMA") {
            return database_level(i + 1);
        }
        if kw(i, "TEMPORARY") {
            return None;
        }
        if kw(i, "TABLE") {
            i += 1;
            skip_if_exists(&words, &mut i);
            let (db, table) = qualified(&words, &mut i, default_db)?;
            return Some(Statement {
                database: db.clone(),
                tables: vec![(ChangeType::Create, db, table)],
            });
        }
        // CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX name ON table
        while kw(i, "UNIQUE") || kw(i, "FULLTEXT") || kw(i, "SPATIAL") || kw(i, "ONLINE") {
            i += 1;
        }
        if kw(i, "INDEX") {
            return index_on(&words, i + 1, default_db);
        }
        return None;
    }
    if is_keyword(verb, "ALTER") {
        while kw(i, "ONLINE") || kw(i, "IGNORE") {
            i += 1;
        }
        if kw(i, "DATABASE") || kw(i, "SCHEMA") {
            return database_level(i + 1);
        }
        if kw(i, "TABLE") {
            i += 1;
            let (db, table) = qualified(&words, &mut i, default_db)?;
            return Some(Statement {
                database: db.clone(),
                tables: vec![(ChangeType::Alter, db, table)],
            });
        }
        return None;
    }
    if is_keyword(verb, "DROP") {
        if kw(i, "DATABASE") || kw(i, "SCHEMA") {
            return database_level(i + 1);
        }
        if kw(i, "TEMPORARY") {
            return None;
        }
        if kw(i, "INDEX") {
            i += 1;
            if kw(i, "IF") {
                skip_if_exists(&words, &mut i);
            }
            return index_on(&words, i, default_db);
        }
        if kw(i, "TABLE") {
            i += 1;
            skip_if_exists(&words, &mut i);
            let mut tables = Vec::new();
            while let Some((db, table)) = qualified(&words, &mut i, default_db) {
                tables.push((ChangeType::Drop, db, table));
                if words.get(i).map(String::as_str) != Some(",") {
                    break;
                }
                i += 1;
            }
            let (_, db, _) = tables.first()?;
            return Some(Statement {
                database: db.clone(),
                tables,
            });
        }
        return None;
    }
    if is_keyword(verb, "RENAME") && kw(i, "TABLE") {
        // RENAME TABLE a TO b[, c TO d]: the old names dropped, the new ones created.
        i += 1;
        let mut tables = Vec::new();
        loop {
            let (old_db, old) = qualified(&words, &mut i, default_db)?;
            if !kw(i, "TO") {
                return None;
            }
            i += 1;
            let (new_db, new) = qualified(&words, &mut i, default_db)?;
            tables.push((ChangeType::Drop, old_db, old));
            tables.push((ChangeType::Create, new_db, new));
            if words.get(i).map(String::as_str) != Some(",") {
                break;
            }
            i += 1;
        }
        let (_, db, _) = tables.first()?;
        return Some(Statement {
            database: db.clone(),
            tables,
        });
    }
    None
}

/// `name ON [db.]table` after `INDEX`: an ALTER of the table.
fn index_on(words: &[String], mut i: usize, default_db: &str) -> Option<Statement> {
    i += 1; // the index's name
    if !words.get(i).is_some_and(|w| is_keyword(w, "ON")) {
        return None;
    }
    i += 1;
    let (db, table) = qualified(words, &mut i, default_db)?;
    Some(Statement {
        database: db.clone(),
        tables: vec![(ChangeType::Alter, db, table)],
    })
}

impl Statement {
    /// The statement as `source` captures it: only its captured tables; `None` when it
    /// touches nothing captured (a database-level statement counts when the database is one
    /// the include list reaches).
    pub fn captured(mut self, source: &MysqlSourceConfig) -> Option<Self> {
        if self.tables.is_empty() {
            return source.captures_database(&self.database).then_some(self);
        }
        self.tables
            .retain(|(_, db, table)| source.captures(db, table));
        let (_, db, _) = self.tables.first()?;
        self.database = db.clone();
        Some(self)
    }
}

/// One column as `information_schema.COLUMNS` describes it.
struct Column {
    name: String,
    data_type: String,
    column_type: String,
    charset: Option<String>,
    nullable: bool,
    extra: String,
    comment: String,
    default: Option<String>,
    position: u64,
}

/// `tableChanges[].table` of `database.table` as the server describes it now (`None`: no such
/// table, e.g. dropped by a later statement).
///
/// # Errors
///
/// Retryable when a query fails.
pub async fn read_table(
    conn: &mut Conn,
    flavor: Flavor,
    database: &str,
    table: &str,
) -> Result<Option<Vec<u8>>, PipelineError> {
    let fail = || sql_error("cannot read a table's structure from information_schema");
    let head: Option<(Option<String>, Option<String>, Option<String>)> = conn
        .exec_first(
            "SELECT t.TABLE_COLLATION, c.CHARACTER_SET_NAME, t.TABLE_COMMENT \
             FROM information_schema.TABLES t \
             LEFT JOIN information_schema.COLLATIONS c ON c.COLLATION_NAME = t.TABLE_COLLATION \
             WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?",
            (database, table),
        )
        .await
        .map_err(fail())?;
    let Some((collation, charset, comment)) = head else {
        return Ok(None);
    };
    let charset =
        charset.or_else(|| collation.and_then(|c| c.split('_').next().map(str::to_owned)));
    let key: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' \
             ORDER BY SEQ_IN_INDEX",
            (database, table),
        )
        .await
        .map_err(fail())?;
    type Row = (
        String,
        String,
        String,
        Option<String>,
        String,
        String,
        String,
        Option<String>,
        u64,
    );
    let rows: Vec<Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE, EXTRA, \
             COLUMN_COMMENT, COLUMN_DEFAULT, ORDINAL_POSITION FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(fail())?;
    // Debezium's parser reads the `JSON` of MariaDB's definition.
    let json = JsonChecks::read(conn, flavor, database, table)
        .await
        .map_err(fail())?;
    let columns: Vec<Column> = rows
        .into_iter()
        .map(
            |(
                name,
                data_type,
                column_type,
                charset,
                nullable,
                extra,
                comment,
                default,
                position,
            )| {
                Column {
                    name,
                    data_type,
                    column_type,
                    charset,
                    nullable: nullable.eq_ignore_ascii_case("YES"),
                    extra,
                    comment,
                    default,
                    position,
                }
            },
        )
        .map(|mut column: Column| {
            if json.is_json(&column.name, &column.data_type) {
                column.data_type = "json".to_owned();
                column.column_type = "json".to_owned();
                column.charset = None;
            }
            column
        })
        .collect();
    Ok(Some(table_json(
        flavor,
        charset.as_deref(),
        &key,
        &columns,
        comment.as_deref().unwrap_or_default(),
    )))
}

fn write_opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(v) => write_json_str(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_opt_int(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(v) => write_int(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// The numbers in a `COLUMN_TYPE`'s parentheses (`decimal(10,2)` → 10, 2).
fn type_numbers(column_type: &str) -> (Option<u64>, Option<u64>) {
    let Some(inner) = column_type
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inner, _)| inner)
    else {
        return (None, None);
    };
    let mut parts = inner.split(',').map(|p| p.trim().parse::<u64>().ok());
    (parts.next().flatten(), parts.next().flatten())
}

/// An ENUM's or SET's labels as `COLUMN_TYPE` quotes them (`'a'`, `'b'`).
fn labels(column_type: &str) -> Vec<String> {
    let Some(inner) = column_type
        .split_once('(')
        .map(|(_, rest)| rest.strip_suffix(')').unwrap_or(rest))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if quoted && chars.peek() == Some(&'\'') => {
                current.push_str("''");
                chars.next();
            }
            '\'' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The JDBC type number Debezium's MySQL connector gives a column type.
fn jdbc_type(data_type: &str) -> i32 {
    match data_type {
        "tinyint" | "smallint" => 5,
        "mediumint" | "int" | "integer" | "year" => 4,
        "bigint" => -5,
        "decimal" | "numeric" => 3,
        "float" => 6,
        "double" | "real" => 8,
        "bit" => -7,
        "char" | "enum" | "set" => 1,
        "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => 12,
        "binary" => -2,
        "varbinary" => -3,
        "tinyblob" | "blob" | "mediumblob" | "longblob" => 2004,
        "date" => 91,
        "datetime" => 93,
        "timestamp" => 2014,
        "time" => 92,
        "bool" | "boolean" => 16,
        _ => 1111,
    }
}

/// Debezium's `tableChanges[].table` object.
fn table_json(
    flavor: Flavor,
    charset: Option<&str>,
    key: &[String],
    columns: &[Column],
    comment: &str,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + columns.len() * 320);
    out.extend_from_slice(b"{\"defaultCharsetName\":");
    write_opt_str(&mut out, charset);
    out.extend_from_slice(b",\"primaryKeyColumnNames\":[");
    for (i, name) in key.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_str(&mut out, name);
    }
    out.extend_from_slice(b"],\"columns\":[");
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_column(&mut out, flavor, column);
    }
    out.extend_from_slice(b"],\"comment\":");
    write_opt_str(&mut out, (!comment.is_empty()).then_some(comment));
    out.push(b'}');
    out
}

fn write_column(out: &mut Vec<u8>, flavor: Flavor, column: &Column) {
    let data_type = column.data_type.to_ascii_lowercase();
    let unsigned = column.column_type.to_ascii_lowercase().contains("unsigned");
    let mut type_name = data_type.to_ascii_uppercase();
    if unsigned {
        type_name.push_str(" UNSIGNED");
    }
    let (mut length, scale) = type_numbers(&column.column_type);
    let enum_values =
        matches!(data_type.as_str(), "enum" | "set").then(|| labels(&column.column_type));
    if let Some(values) = &enum_values {
        // Debezium: an ENUM's length is 1, a SET's that of all its labels joined by commas.
        length = Some(if data_type == "enum" {
            1
        } else {
            let chars: usize = values
                .iter()
                .map(|v| v.chars().count().saturating_sub(2))
                .sum();
            (chars + values.len().saturating_sub(1)) as u64
        });
    }
    let extra = column.extra.to_ascii_uppercase();
    let generated = extra.contains("VIRTUAL GENERATED")
        || extra.contains("STORED GENERATED")
        || extra.contains("PERSISTENT GENERATED")
        || extra == "VIRTUAL"
        || extra == "PERSISTENT"
        || extra == "STORED";
    // MariaDB writes a default as an SQL expression (`'text'`, `NULL`); MySQL the value.
    let default = match (flavor, column.default.as_deref()) {
        (_, None) => None,
        (Flavor::Mariadb, Some("NULL")) => None,
        (Flavor::Mariadb, Some(v)) if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') => {
            Some(v[1..v.len() - 1].replace("''", "'"))
        }
        (_, Some(v)) => Some(v.to_owned()),
    };
    out.extend_from_slice(b"{\"name\":");
    write_json_str(out, &column.name);
    out.extend_from_slice(b",\"jdbcType\":");
    write_int(out, jdbc_type(&data_type));
    out.extend_from_slice(b",\"nativeType\":null,\"typeName\":");
    write_json_str(out, &type_name);
    out.extend_from_slice(b",\"typeExpression\":");
    write_json_str(out, &type_name);
    out.extend_from_slice(b",\"charsetName\":");
    write_opt_str(out, column.charset.as_deref());
    out.extend_from_slice(b",\"length\":");
    write_opt_int(out, length);
    out.extend_from_slice(b",\"scale\":");
    write_opt_int(out, scale);
    out.extend_from_slice(b",\"position\":");
    write_int(out, column.position);
    out.extend_from_slice(b",\"optional\":");
    out.extend_from_slice(if column.nullable { b"true" } else { b"false" });
    out.extend_from_slice(b",\"autoIncremented\":");
    out.extend_from_slice(if extra.contains("AUTO_INCREMENT") {
        b"true"
    } else {
        b"false"
    });
    out.extend_from_slice(b",\"generated\":");
    out.extend_from_slice(if generated { b"true" } else { b"false" });
    out.extend_from_slice(b",\"comment\":");
    write_opt_str(
        out,
        (!column.comment.is_empty()).then_some(column.comment.as_str()),
    );
    out.extend_from_slice(b",\"defaultValueExpression\":");
    write_opt_str(out, default.as_deref());
    out.extend_from_slice(b",\"enumValues\":");
    match &enum_values {
        Some(values) => {
            out.push(b'[');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_str(out, v);
            }
            out.push(b']');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

/// One schema-change event, ready to produce.
pub struct SchemaChange {
    /// The database (`databaseName`, `source.db`).
    pub database: String,
    /// `source.table`: the first table changed, if any.
    pub table: Option<String>,
    /// The statement.
    pub ddl: String,
    /// `tableChanges`: type, database, table and the table's structure (`None` is `null`).
    pub changes: Vec<(ChangeType, String, String, Option<Vec<u8>>)>,
}

impl SchemaChange {
    /// The record on `topic`, with `source` (its `db`/`table` are this event's) and the
    /// processing time `now_micros`.
    pub fn record(
        &self,
        topic: &Arc<str>,
        prefix_name: &str,
        source: &BinlogSource,
        now_micros: i64,
    ) -> OutRecord {
        let mut key = Vec::with_capacity(32 + self.database.len());
        key.extend_from_slice(b"{\"databaseName\":");
        write_json_str(&mut key, &self.database);
        key.push(b'}');
        let mut value = Vec::with_capacity(512 + self.ddl.len());
        value.extend_from_slice(b"{\"source\":");
        super::encode::write_source_head(&mut value, prefix_name, source);
        value.extend_from_slice(b",\"db\":");
        write_json_str(&mut value, &self.database);
        value.extend_from_slice(b",\"sequence\":null,\"ts_us\":");
        write_int(&mut value, i64::from(source.ts_sec) * 1_000_000);
        value.extend_from_slice(b",\"ts_ns\":");
        write_int(&mut value, i64::from(source.ts_sec) * 1_000_000_000);
        value.extend_from_slice(b",\"table\":");
        write_opt_str(&mut value, self.table.as_deref());
        value.extend_from_slice(b",\"server_id\":");
        write_int(&mut value, source.server_id);
        value.extend_from_slice(b",\"gtid\":");
        write_opt_str(&mut value, source.gtid.as_deref());
        value.extend_from_slice(b",\"file\":");
        write_json_str(&mut value, &source.file);
        value.extend_from_slice(b",\"pos\":");
        write_int(&mut value, source.pos);
        value.extend_from_slice(b",\"row\":0,\"thread\":null,\"query\":null},\"ts_ms\":");
        write_int(&mut value, now_micros.div_euclid(1000));
        value.extend_from_slice(b",\"databaseName\":");
        write_json_str(&mut value, &self.database);
        value.extend_from_slice(b",\"schemaName\":null,\"ddl\":");
        write_json_str(&mut value, &self.ddl);
        value.extend_from_slice(b",\"tableChanges\":[");
        for (i, (kind, db, table, structure)) in self.changes.iter().enumerate() {
            if i > 0 {
                value.push(b',');
            }
            value.extend_from_slice(b"{\"type\":\"");
            value.extend_from_slice(kind.as_str().as_bytes());
            value.extend_from_slice(b"\",\"id\":");
            write_json_str(&mut value, &format!("\"{db}\".\"{table}\""));
            value.extend_from_slice(b",\"table\":");
            match structure {
                Some(json) => value.extend_from_slice(json),
                None => value.extend_from_slice(b"null"),
            }
            value.push(b'}');
        }
        value.extend_from_slice(b"]}");
        OutRecord {
            partition: None,
            topic: Arc::clone(topic),
            key: Some(key),
            value: Some(value),
            headers: vec![
                (HEADER_BINLOG_FILE.into(), source.file.to_string()),
                (HEADER_BINLOG_POS.into(), source.pos.to_string()),
            ],
        }
    }
}

/// The schema change of a streamed statement `sql` (session database `default_db`) when it is
/// a DDL statement on something `source` captures, its tables' structures read on `conn`.
///
/// # Errors
///
/// Retryable when `information_schema` cannot be read.
pub async fn streamed(
    conn: &mut Conn,
    flavor: Flavor,
    source: &MysqlSourceConfig,
    sql: &str,
    default_db: &str,
) -> Result<Option<SchemaChange>, PipelineError> {
    let Some(statement) = classify(sql, default_db).and_then(|s| s.captured(source)) else {
        return Ok(None);
    };
    let mut changes = Vec::with_capacity(statement.tables.len());
    for (kind, db, table) in statement.tables {
        let structure = match kind {
            ChangeType::Drop => None,
            ChangeType::Create | ChangeType::Alter => read_table(conn, flavor, &db, &table).await?,
        };
        changes.push((kind, db, table, structure));
    }
    Ok(Some(SchemaChange {
        table: changes.first().map(|(_, _, table, _)| table.clone()),
        database: statement.database,
        ddl: sql.to_owned(),
        changes,
    }))
}

/// The initial snapshot's schema changes (Debezium's synthesised statements, see the module
/// docs) for `tables` (database and table order), read on `conn` (in the snapshot's
/// transaction).
///
/// # Errors
///
/// Retryable when a query fails.
pub async fn snapshot(
    conn: &mut Conn,
    flavor: Flavor,
    tables: &[CapturedTable],
) -> Result<Vec<SchemaChange>, PipelineError> {
    let fail = || sql_error("cannot read the captured tables' definitions");
    let mut out = Vec::new();
    let server: Option<(String, String)> = conn
        .query_first("SELECT @@character_set_server, @@collation_server")
        .await
        .map_err(fail())?;
    if let Some((charset, collation)) = server {
        out.push(SchemaChange {
            database: String::new(),
            table: None,
            ddl: format!("SET character_set_server={charset}, collation_server={collation}"),
            changes: Vec::new(),
        });
    }
    let quote = crate::sql::quote_mysql_ident;
    for t in tables {
        out.push(SchemaChange {
            database: t.database.clone(),
            table: Some(t.table.clone()),
            ddl: format!(
                "DROP TABLE IF EXISTS {}.{}",
                quote(&t.database),
                quote(&t.table)
            ),
            changes: vec![(ChangeType::Drop, t.database.clone(), t.table.clone(), None)],
        });
    }
    let mut databases: Vec<&str> = tables.iter().map(|t| t.database.as_str()).collect();
    databases.dedup();
    for database in databases {
        let db = |ddl: String| SchemaChange {
            database: database.to_owned(),
            table: None,
            ddl,
            changes: Vec::new(),
        };
        out.push(db(format!("DROP DATABASE IF EXISTS {}", quote(database))));
        let defaults: Option<(String, String)> = conn
            .exec_first(
                "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME \
                 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
                (database,),
            )
            .await
            .map_err(fail())?;
        out.push(db(match defaults {
            Some((charset, collation)) => format!(
                "CREATE DATABASE {} CHARSET {charset} COLLATE {collation}",
                quote(database)
            ),
            None => format!("CREATE DATABASE {}", quote(database)),
        }));
        out.push(db(format!("USE {}", quote(database))));
        for t in tables.iter().filter(|t| t.database == database) {
            let create: Option<(String, String)> = conn
                .query_first(format!(
                    "SHOW CREATE TABLE {}.{}",
                    quote(&t.database),
                    quote(&t.table)
                ))
                .await
                .map_err(fail())?;
            let Some((_, ddl)) = create else { continue };
            let structure = read_table(conn, flavor, &t.database, &t.table).await?;
            out.push(SchemaChange {
                database: t.database.clone(),
                table: Some(t.table.clone()),
                ddl,
                changes: vec![(
                    ChangeType::Create,
                    t.database.clone(),
                    t.table.clone(),
                    structure,
                )],
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(sql: &str) -> Vec<(ChangeType, String, String)> {
        classify(sql, "d").map(|s| s.tables).unwrap_or_default()
    }

    #[test]
    fn ddl_statements_are_recognised_by_their_first_words() {
        use ChangeType::*;
        let t = |k, d: &str, n: &str| (k, d.to_owned(), n.to_owned());
        assert_eq!(
            tables("ALTER TABLE evolve ADD COLUMN extra VARCHAR(10) DEFAULT 'new'"),
            vec![t(Alter, "d", "evolve")]
        );
        assert_eq!(
            tables("/* c */ create table if not exists `o`.`a``b` (id int)"),
            vec![t(Create, "o", "a`b")]
        );
        assert_eq!(
            tables("DROP TABLE IF EXISTS `a`,o.b /* generated by server */"),
            vec![t(Drop, "d", "a"), t(Drop, "o", "b")]
        );
        assert_eq!(
            tables("RENAME TABLE a TO o.b"),
            vec![t(Drop, "d", "a"), t(Create, "o", "b")]
        );
        assert_eq!(
            tables("CREATE UNIQUE INDEX i ON t (a)"),
            vec![t(Alter, "d", "t")]
        );
        assert_eq!(tables("DROP INDEX i ON o.t"), vec![t(Alter, "o", "t")]);
        let db = classify("CREATE DATABASE IF NOT EXISTS `x`", "d").unwrap();
        assert_eq!((db.database.as_str(), db.tables.len()), ("x", 0));
        for other in [
            "BEGIN",
            "COMMIT",
            "CREATE TEMPORARY TABLE t (a int)",
            "TRUNCATE TABLE t",
            "CREATE VIEW v AS SELECT 1",
            "INSERT INTO t VALUES (1)",
            "GRANT ALL ON *.* TO u",
        ] {
            assert_eq!(classify(other, "d"), None, "{other}");
        }
    }

    #[test]
    fn column_types_become_debeziums_lengths_and_labels() {
        assert_eq!(type_numbers("decimal(10,2)"), (Some(10), Some(2)));
        assert_eq!(type_numbers("int(10) unsigned"), (Some(10), None));
        assert_eq!(type_numbers("text"), (None, None));
        assert_eq!(labels("enum('a','b''c')"), vec!["'a'", "'b''c'"]);
        let column = Column {
            name: "s".into(),
            data_type: "set".into(),
            column_type: "set('a','b','c')".into(),
            charset: Some("utf8mb4".into()),
            nullable: true,
            extra: String::new(),
            comment: String::new(),
            default: Some("'a'".into()),
            position: 2,
        };
        let mut out = Vec::new();
        write_column(&mut out, Flavor::Mariadb, &column);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"name":"s","jdbcType":1,"nativeType":null,"typeName":"SET","typeExpression":"SET","charsetName":"utf8mb4","length":5,"scale":null,"position":2,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":"a","enumValues":["'a'","'b'","'c'"]}"#
        );
    }
}
