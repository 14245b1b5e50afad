//! A record as the transforms see it: topic, key, value and headers, taken from and put back
//! into the encoder's [`OutRecord`](crate::record::OutRecord).

use std::borrow::Cow;
use std::sync::Arc;

use super::json::Data;

/// A record as the transforms see it.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its topic.
    pub topic: Arc<str>,
    /// Its key.
    pub key: Data,
    /// Its value (`Data::value` `None`: a null value; with `Schema::None`: a tombstone).
    pub value: Data,
    /// Its headers.
    pub headers: Vec<(Cow<'static, str>, String)>,
    /// The Connect schemas (JSON text) of headers a transform of the chain added with one
    /// (`ExtractNewRecordState`'s `add.headers`, `HeaderFrom`), by header name, for
    /// `HeaderToValue`; a header without one is a string (Connect's `addString`). Not written.
    pub header_schemas: Vec<(String, String)>,
    /// The partition a transform chose (`PartitionRouting`); `None`: the producer's.
    pub partition: Option<i32>,
}

impl Record {
    /// The Connect schema of the header `name` (JSON text): the one a transform gave it, else
    /// a required string's.
    pub fn header_schema(&self, name: &str) -> &str {
        self.header_schemas
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(r#"{"type":"string","optional":false}"#, |(_, s)| s.as_str())
    }
}
