//! The record sluice hands to the producer: topic, key, value and headers. A leaf module, so
//! that what shapes records (transforms) needs neither the producer nor the configuration.

/// A record as the producer sends it (also how a failed record comes back).
#[derive(Debug, Clone)]
pub struct OutRecord {
    /// Destination topic.
    pub topic: std::sync::Arc<str>,
    /// Key bytes (JSON), if any.
    pub key: Option<Vec<u8>>,
    /// Value bytes (JSON); `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers, name and value (names are static but for the outbox's column headers).
    pub headers: Vec<(std::borrow::Cow<'static, str>, String)>,
    /// The partition a transform chose (Debezium's `PartitionRouting`); `None`: the
    /// producer's partitioner (murmur2 of the key, as Java's client).
    pub partition: Option<i32>,
}

impl OutRecord {
    /// Serialized size as counted in metrics.
    pub fn len(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len)
    }

    /// Whether the record carries no key and no value bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The librdkafka headers.
    pub fn owned_headers(&self) -> rdkafka::message::OwnedHeaders {
        self.headers.iter().fold(
            rdkafka::message::OwnedHeaders::new(),
            |headers, (name, value)| {
                headers.insert(rdkafka::message::Header {
                    key: name,
                    value: Some(value.as_bytes()),
                })
            },
        )
    }
}
