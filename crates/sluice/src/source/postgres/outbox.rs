//! The outbox router (`[source.postgres.outbox]`, Debezium's `EventRouter`): where an outbox
//! row's parts are, the record it becomes, and that record's schemas per routed topic.
//!
//! Bare JSON keeps the columns' text as the key and value bytes. With schemas (JSON with
//! schemas, Avro) the key is the aggregate id column's value and the value the payload
//! column's, each under the column's Connect schema, as Debezium's router writes them with a
//! converter that carries schemas (`table.expand.json.payload` off, its default: a `jsonb`
//! payload is a string named `io.debezium.data.Json`). The topic comes from each row, so the
//! schemas are registered under a topic's subjects the first time a row is routed there, before
//! that row is queued ([`OutboxLayout::prepare`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::cell::write_datum;
use super::column::ColumnInfo;
use super::pgoutput::{Datum, TupleData};
use crate::error::PipelineError;
use crate::event::EventOptions;
use crate::event::schema::RenderedSchemas;
use crate::kafka::OutRecord;

/// Where the outbox's parts are in its rows.
#[derive(Debug)]
pub struct OutboxLayout {
    /// The topic with `{aggregate_type}` to replace.
    pub topic: String,
    /// The routing column.
    pub aggregate_type: usize,
    /// The key column.
    pub aggregate_id: usize,
    /// The value column.
    pub payload: usize,
    /// Every other column, as a header of its name.
    pub headers: Vec<(usize, std::borrow::Cow<'static, str>)>,
    /// The key's and value's schemas (the aggregate id's and the payload column's Connect
    /// schemas) when the events carry schemas; `None`: the columns' bytes as they are.
    pub schemas: Option<RenderedSchemas>,
    /// Per routed topic, [`Self::schemas`] with the ids registered under its subjects.
    registered: Mutex<HashMap<String, Arc<RenderedSchemas>>>,
}

impl OutboxLayout {
    /// Finds the configured columns in the table's columns.
    ///
    /// # Errors
    ///
    /// The configuration key of a column the table does not have, and the columns it has.
    pub fn resolve(
        columns: &[ColumnInfo],
        config: &super::config::OutboxConfig,
    ) -> Result<Self, (String, String)> {
        let find = |key: &str, name: &str| {
            columns.iter().position(|c| c.name == name).ok_or_else(|| {
                let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                (
                    format!("source.postgres.outbox.{key}"),
                    format!(
                        "the outbox table {} has no column {name:?}; its columns: {}",
                        config.table,
                        names.join(", ")
                    ),
                )
            })
        };
        let aggregate_type = find("aggregate_type_column", &config.aggregate_type_column)?;
        let aggregate_id = find("aggregate_id_column", &config.aggregate_id_column)?;
        let payload = find("payload_column", &config.payload_column)?;
        let headers = match config.header_columns() {
            Some(listed) => listed
                .into_iter()
                .map(|(column, header)| {
                    Ok((
                        find("headers", column)?,
                        std::borrow::Cow::Owned(header.to_owned()),
                    ))
                })
                .collect::<Result<_, (String, String)>>()?,
            None => columns
                .iter()
                .enumerate()
                .filter(|(i, _)| ![aggregate_type, aggregate_id, payload].contains(i))
                .map(|(i, c)| (i, std::borrow::Cow::Owned(c.name.clone())))
                .collect(),
        };
        Ok(Self {
            topic: config.topic.clone(),
            aggregate_type,
            aggregate_id,
            payload,
            headers,
            schemas: None,
            registered: Mutex::new(HashMap::new()),
        })
    }

    /// The topic of an outbox row; `None` when its aggregate type is NULL.
    pub fn topic_of(&self, row: &TupleData) -> Option<String> {
        match row.0.get(self.aggregate_type) {
            Some(Datum::Text(t)) => Some(
                self.topic
                    .replace("{aggregate_type}", &String::from_utf8_lossy(t)),
            ),
            _ => None,
        }
    }

    /// The schemas of `topic`'s records, once [`Self::prepare`] registered them.
    fn registered(&self, topic: &str) -> Option<Arc<RenderedSchemas>> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .cloned()
    }

    /// Records `schemas` as `topic`'s registered ones (tests: no registry).
    #[cfg(test)]
    pub(super) fn set_registered(&self, topic: &str, schemas: RenderedSchemas) {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned(), Arc::new(schemas));
    }

    /// Registers the schemas under the subjects of the topic `row` is routed to, the first
    /// time a row goes there (nothing to do without schemas, or for a row with no topic).
    ///
    /// # Errors
    ///
    /// As [`crate::registry::register_schemas`]: the pipeline stops before the row is queued.
    pub async fn prepare(
        &self,
        row: &TupleData,
        registry: Option<&crate::registry::Registry>,
        events: &EventOptions,
        table: &str,
    ) -> Result<(), PipelineError> {
        let (Some(schemas), Some(topic)) = (&self.schemas, self.topic_of(row)) else {
            return Ok(());
        };
        if self.registered(&topic).is_some() {
            return Ok(());
        }
        let mut schemas = schemas.clone();
        schemas.registered =
            crate::registry::register_schemas(registry, &topic, &schemas, events, table).await?;
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic, Arc::new(schemas));
        Ok(())
    }

    /// The event of an outbox row: key = aggregate id, value = payload (NULL → a tombstone),
    /// the other columns as headers after the position headers; with schemas, in the events'
    /// formats under the schemas [`Self::prepare`] registered for the row's topic (`streamed`:
    /// the row comes from pgoutput, not a snapshot's query).
    ///
    /// # Panics
    ///
    /// With schemas, when the row's topic's were not prepared (a bug).
    pub(super) fn encode(
        &self,
        row: &TupleData,
        mut headers: Vec<(std::borrow::Cow<'static, str>, String)>,
        context: (&str, &[ColumnInfo], &EventOptions, bool),
    ) -> Option<OutRecord> {
        let (table, columns, events, streamed) = context;
        for (i, name) in &self.headers {
            if let Some(Datum::Text(value)) = row.0.get(*i) {
                headers.push((name.clone(), String::from_utf8_lossy(value).into_owned()));
            }
        }
        let topic = self.topic_of(row)?;
        let Some(_) = &self.schemas else {
            let bytes = |i: usize| match row.0.get(i) {
                Some(Datum::Text(t) | Datum::Binary(t)) => Some(t.to_vec()),
                _ => None,
            };
            return Some(OutRecord {
                partition: None,
                topic: Arc::from(topic),
                key: bytes(self.aggregate_id),
                value: bytes(self.payload),
                headers,
            });
        };
        let json = |i: usize| match row.0.get(i) {
            None | Some(Datum::Null) => None,
            datum => {
                let mut out = Vec::with_capacity(64);
                write_datum(table, &columns[i], datum, &mut out, events, streamed);
                Some(out)
            }
        };
        let schemas = self
            .registered(&topic)
            .unwrap_or_else(|| panic!("{topic}: the outbox's schemas were not registered (a bug)"));
        let record = OutRecord {
            partition: None,
            topic: Arc::from(topic),
            key: json(self.aggregate_id),
            value: json(self.payload),
            headers,
        };
        Some(schemas.wrap_record(events, record))
    }
}
