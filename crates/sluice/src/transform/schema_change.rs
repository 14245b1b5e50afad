//! Debezium's `SchemaChangeEventFilter`: schema change events (the MySQL source's records on
//! the `<topic.prefix>` topic, `…SchemaChangeValue`) of the excluded types dropped. A change's
//! type is its first `tableChanges` entry's `type` (`CREATE`, `ALTER`, `DROP`, `TRUNCATE`), or
//! `DATABASE` when it changes no table (`CREATE DATABASE`, `USE`, `SET …`); an event without
//! `tableChanges` is dropped. Other records pass unchanged.

use super::json::{Members, Schema, as_str, elements};
use super::record::Record;
use super::schema;

/// Debezium's `SchemaChangeEventType`s.
pub const TYPES: [&str; 5] = ["CREATE", "ALTER", "DROP", "TRUNCATE", "DATABASE"];

/// `SchemaChangeEventFilter`.
#[derive(Debug)]
pub struct SchemaChangeEventFilter {
    /// `schema.change.event.exclude.list`: the types dropped (of [`TYPES`]).
    pub excluded: Vec<&'static str>,
}

impl SchemaChangeEventFilter {
    /// Applies the transform; `Ok(None)` drops the record.
    pub fn apply(&self, record: Record) -> Result<Option<Record>, String> {
        let Some(text) = record.value.value.as_deref() else {
            return Ok(Some(record));
        };
        let Ok(members) = Members::parse(text) else {
            return Ok(Some(record));
        };
        let is_schema_change = match &record.value.schema {
            Schema::Json(s) => schema::name(s).is_some_and(|n| {
                n.ends_with(".SchemaChangeValue") || n.ends_with(".SchemaChangeKey")
            }),
            // Without schemas: the members only a schema change event has.
            _ => members.get("ddl").is_some() && members.get("databaseName").is_some(),
        };
        if !is_schema_change {
            return Ok(Some(record));
        }
        let Some(changes) = members
            .get("tableChanges")
            .filter(|c| c.get() != "null")
            .and_then(|c| elements(c.get()))
        else {
            return Ok(None);
        };
        let kind = match changes.first() {
            None => "DATABASE".to_owned(),
            Some(first) => Members::parse(first.get())?
                .get("type")
                .and_then(|t| as_str(t.get()).map(|t| t.into_owned()))
                .ok_or("a tableChanges entry without its type")?,
        };
        Ok((!self.excluded.contains(&kind.as_str())).then_some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::json::Data;

    /// A schema change event as the MySQL source writes it (without schemas).
    fn event(ddl: &str, changes: &str) -> Record {
        Record {
            topic: "dbzmy".into(),
            key: Data::read(Some(br#"{"databaseName":"shop"}"#), false).unwrap(),
            value: Data::read(
                Some(format!(r#"{{"source":{{"db":"shop"}},"ts_ms":1,"databaseName":"shop","schemaName":null,"ddl":"{ddl}","tableChanges":{changes}}}"#).as_bytes()),
                false,
            )
            .unwrap(),
            headers: Vec::new(),
            header_schemas: Vec::new(),
            partition: None,
        }
    }

    #[test]
    fn schema_changes_of_excluded_types_are_dropped() {
        let filter = SchemaChangeEventFilter {
            excluded: vec!["DROP", "DATABASE"],
        };
        let kept = |r: Record| filter.apply(r).unwrap().is_some();
        assert!(!kept(event(
            "DROP TABLE t",
            r#"[{"type":"DROP","id":"\"shop\".\"t\"","table":null}]"#
        )));
        assert!(!kept(event("USE `shop`", "[]")));
        assert!(kept(event(
            "CREATE TABLE t (id int)",
            r#"[{"type":"CREATE","id":"\"shop\".\"t\"","table":{}}]"#
        )));
        assert!(kept(event(
            "ALTER TABLE t ADD c int",
            r#"[{"type":"ALTER","id":"x","table":{}}]"#
        )));
        assert!(!kept(event("odd", "null")));
        // A change event and a tombstone pass.
        let mut change = event("x", "[]");
        change.value =
            Data::read(Some(br#"{"before":null,"after":{"id":1},"op":"c"}"#), false).unwrap();
        assert!(kept(change));
        let mut tombstone = event("x", "[]");
        tombstone.value = Data::read(None, false).unwrap();
        assert!(kept(tombstone));
    }
}
