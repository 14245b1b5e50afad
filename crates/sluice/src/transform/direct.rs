//! The direct path for the most common chain: `ExtractNewRecordState` (without headers,
//! `route.by.field` or dropped fields), then any number of `RegexRouter`s, none with a
//! predicate, on JSON without schemas. A source's encoder that recognizes it writes the row the
//! chain would unwrap instead of an envelope the chain then reads and writes again (issue 42:
//! the chain cost 16 % of the backlog's rate at 6 partitions). What it writes must equal the
//! chain's output byte for byte: the encoders' tests compare the two on every kind of change.

use std::sync::Arc;

use super::unwrap::DeleteMode;
use super::{Chain, Transform};

/// The chain as a direct encoder applies it: see the module's documentation.
#[derive(Debug)]
pub struct Direct {
    chain: Arc<Chain>,
}

/// Where an `add.fields` entry's value comes from in the change event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventField<'a> {
    /// A member of the envelope itself (`op`, `ts_ms`, `ts_us`, `ts_ns`).
    Envelope(&'a str),
    /// A member of the `source` block.
    Source(&'a str),
    /// A member of the `transaction` block.
    Transaction(&'a str),
    /// Anything else (another struct, a field a transform before this one added).
    Other,
}

impl Direct {
    /// The direct form of `chain`, when it has one.
    pub fn of(chain: &Arc<Chain>) -> Option<Self> {
        if chain.key_schemas || chain.value_schemas || chain.writes_avro() {
            return None;
        }
        let (first, rest) = chain.steps.split_first()?;
        let Transform::Unwrap(unwrap) = &first.transform else {
            return None;
        };
        let plain_unwrap = first.predicate.is_none()
            && unwrap.add_headers.is_empty()
            && unwrap.route_by_field.is_none()
            && unwrap.drop_fields.is_none();
        let plain_routers = rest
            .iter()
            .all(|s| s.predicate.is_none() && matches!(s.transform, Transform::RegexRouter(_)));
        (plain_unwrap && plain_routers).then(|| Self {
            chain: Arc::clone(chain),
        })
    }

    fn unwrap(&self) -> &super::unwrap::Unwrap {
        match &self.chain.steps[0].transform {
            Transform::Unwrap(unwrap) => unwrap,
            _ => unreachable!("Direct::of checked the first step"),
        }
    }

    /// `delete.tombstone.handling.mode`.
    pub fn mode(&self) -> DeleteMode {
        self.unwrap().mode
    }

    /// Whether rows carry `__deleted` (the rewrite modes).
    pub fn rewrites(&self) -> bool {
        self.mode().rewrites()
    }

    /// The `add.fields`, in order: each one's member start (`"__op":`) and where its value is.
    pub fn fields(&self) -> impl Iterator<Item = (&str, EventField<'_>)> {
        self.unwrap().add_fields.iter().map(|f| {
            let at = match (f.parent(), f.field()) {
                (None, field @ ("op" | "ts_ms" | "ts_us" | "ts_ns")) => EventField::Envelope(field),
                (Some("source"), field) => EventField::Source(field),
                (Some("transaction"), field) => EventField::Transaction(field),
                _ => EventField::Other,
            };
            (f.member(), at)
        })
    }

    /// `topic` through the routers.
    pub fn route(&self, topic: &Arc<str>) -> Arc<str> {
        let mut topic = Arc::clone(topic);
        for step in &self.chain.steps[1..] {
            if let Transform::RegexRouter(router) = &step.transform {
                topic = router.route_cached(&topic);
            }
        }
        topic
    }
}
