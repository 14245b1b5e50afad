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
}
