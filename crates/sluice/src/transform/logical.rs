//! Debezium's `ByLogicalTableRouter`: the change events of several physical tables (shards)
//! routed to one logical table's topic, the key made unique across them by a field naming the
//! physical table, the key's and the envelope's schemas renamed after the new topic. Follows
//! Debezium 3.x's `io.debezium.transforms.ByLogicalTableRouter`.

use std::sync::Arc;

use super::json::{Data, Members, ObjectWriter, Schema, string};
use super::record::Record;
use super::router::RegexRouter;
use super::schema;

/// `key.field.name`'s default.
pub const DEFAULT_KEY_FIELD: &str = "__dbz__physicalTableIdentifier";

/// `ByLogicalTableRouter`.
#[derive(Debug)]
pub struct LogicalTableRouter {
    /// `topic.regex` → `topic.replacement`.
    pub topic: RegexRouter,
    /// `key.enforce.uniqueness`: the key gets `key_field`.
    pub enforce_uniqueness: bool,
    /// `key.field.name`.
    pub key_field: String,
    /// `key.field.regex` → `key.field.replacement`: the identifier from the old topic (the old
    /// topic itself when absent or not matching).
    pub key_value: Option<RegexRouter>,
}

impl LogicalTableRouter {
    /// Applies the transform (records whose topic does not match pass unchanged).
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let Some(new_topic) = self.topic.route_matching(&record.topic) else {
            return Ok(record);
        };
        // Debezium: an empty topic name propagates the original record.
        if new_topic.is_empty() {
            return Ok(record);
        }
        if let Some(key) = record.key.value.as_deref() {
            let members = Members::parse(key)?;
            let mut out = ObjectWriter::new();
            for (name, value) in &members.0 {
                out.member(name, value.get());
            }
            let identifier = self
                .key_value
                .as_ref()
                .and_then(|r| r.route_matching(&record.topic))
                .unwrap_or_else(|| record.topic.to_string());
            if self.enforce_uniqueness {
                out.member(&self.key_field, &string(&identifier));
            }
            let key_schema = match &record.key.schema {
                Schema::Json(s) => {
                    let mut fields = schema::fields(s);
                    if self.enforce_uniqueness {
                        fields.push(format!(
                            "{{\"type\":\"string\",\"optional\":false,\"field\":{}}}",
                            string(&self.key_field)
                        ));
                    }
                    Schema::Json(schema::renamed_struct(
                        s,
                        &adjust(&format!("{new_topic}.Key")),
                        Some(&fields),
                    ))
                }
                other => other.clone(),
            };
            record.key = Data {
                schema: key_schema,
                value: Some(out.finish()),
            };
        }
        if let Schema::Json(s) = &record.value.schema
            && record.value.value.is_some()
            && schema::name(s).is_some_and(|n| n.ends_with(".Envelope"))
        {
            let value_name = adjust(&format!("{new_topic}.Value"));
            let fields: Vec<String> = schema::fields(s)
                .into_iter()
                .zip(schema::field_names(s))
                .map(|(field, name)| {
                    if name == "before" || name == "after" {
                        schema::renamed_struct(&field, &value_name, None)
                    } else {
                        field
                    }
                })
                .collect();
            record.value.schema = Schema::Json(schema::renamed_struct(
                s,
                &adjust(&format!("{new_topic}.Envelope")),
                Some(&fields),
            ));
        }
        record.topic = Arc::from(new_topic);
        Ok(record)
    }

    /// The topic records of `topic` go to.
    pub fn route(&self, topic: &str) -> String {
        match self.topic.route_matching(topic) {
            Some(t) if !t.is_empty() => t,
            _ => topic.to_owned(),
        }
    }
}

/// Debezium's `SchemaNameAdjuster` (Avro's rules): a character an Avro name cannot hold becomes
/// `_` (dots separate the namespace's parts; a name part cannot start with a digit).
pub fn adjust(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (n, c) in name.chars().enumerate() {
        let valid =
            c.is_ascii_alphabetic() || c == '_' || (n > 0 && (c.is_ascii_digit() || c == '.'));
        out.push(if valid { c } else { '_' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_adjusted_as_debezium_adjusts_them() {
        assert_eq!(adjust("db.shard-1.orders.Key"), "db.shard_1.orders.Key");
        assert_eq!(adjust("1x.Value"), "_x.Value");
    }
}
