//! An event's key and value on the wire, in the configured format: bare JSON, JSON with its
//! Connect schema (`{"schema":…,"payload":…}`), or Avro under the registered schema id. Kept
//! apart from [`super::schema`], which renders the schemas, and [`super::avro`], which writes
//! Avro from them, so that neither imports the other's caller.

use super::schema::RenderedSchemas;

impl RenderedSchemas {
    /// A key (`is_key`) or value written as a bare JSON payload, in `format`: as it is,
    /// `{"schema":…,"payload":…}`, or Avro under the registered id (`what` names the topic in
    /// the panic of a payload its schema cannot hold, a bug).
    ///
    /// # Panics
    ///
    /// Avro without a registered id for the schema (a bug), or a payload the schema cannot
    /// hold.
    pub fn wrap(
        &self,
        is_key: bool,
        format: super::EventFormat,
        json: Vec<u8>,
        what: &str,
    ) -> Vec<u8> {
        let (head, schema, id) = if is_key {
            (
                self.key_head.as_deref(),
                self.key.as_ref(),
                self.registered.and_then(|r| r.key),
            )
        } else {
            (
                Some(&*self.value_head),
                Some(&self.envelope),
                self.registered.map(|r| r.value),
            )
        };
        match format {
            super::EventFormat::Json => json,
            super::EventFormat::JsonWithSchemas => match head {
                Some(head) => {
                    let mut out = Vec::with_capacity(head.len() + json.len() + 1);
                    out.extend_from_slice(head);
                    out.extend_from_slice(&json);
                    out.push(b'}');
                    out
                }
                None => json,
            },
            super::EventFormat::Avro => match (schema, id) {
                (Some(schema), Some(id)) => super::avro::to_wire(what, schema, id, &json),
                _ => panic!("{what}: no registered Avro schema (a bug)"),
            },
        }
    }
}

impl RenderedSchemas {
    /// A record of bare JSON key and value (a connector's own topic: transactions, schema
    /// changes, messages) in the events' formats.
    ///
    /// # Panics
    ///
    /// As [`RenderedSchemas::wrap`].
    pub fn wrap_record(
        &self,
        events: &super::EventOptions,
        mut record: crate::record::OutRecord,
    ) -> crate::record::OutRecord {
        let topic = std::sync::Arc::clone(&record.topic);
        record.key = record
            .key
            .take()
            .map(|key| self.wrap(true, events.key_format(), key, &topic));
        record.value = record
            .value
            .take()
            .map(|value| self.wrap(false, events.value_format(), value, &topic));
        record
    }
}
