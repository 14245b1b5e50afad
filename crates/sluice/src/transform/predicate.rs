//! Kafka Connect's predicates (`[predicates.<name>]`): conditions a transform is applied on.

use regex_automata::meta::Regex;

use super::record::Record;

/// A predicate.
#[derive(Debug)]
pub enum Predicate {
    /// `TopicNameMatches`: the topic matches `pattern` as a whole.
    TopicNameMatches(Regex),
    /// `HasHeaderKey`: the record has a header `name`.
    HasHeaderKey(String),
    /// `RecordIsTombstone`: the value is null.
    RecordIsTombstone,
}

impl Predicate {
    /// Whether the predicate holds for `record`.
    pub fn test(&self, record: &Record) -> bool {
        match self {
            Predicate::TopicNameMatches(regex) => full_match(regex, &record.topic),
            Predicate::HasHeaderKey(name) => record.headers.iter().any(|(n, _)| n == name),
            // Connect's `record.value() == null`: a tombstone and a null value with a schema.
            Predicate::RecordIsTombstone => record.value.value.is_none(),
        }
    }

    /// Whether the predicate holds for every record of `topic` (`None`: it depends on the
    /// record).
    pub fn test_topic(&self, topic: &str) -> Option<bool> {
        match self {
            Predicate::TopicNameMatches(regex) => Some(full_match(regex, topic)),
            _ => None,
        }
    }
}

/// Java's `Matcher.matches()`: the whole text matches (`regex` is compiled by
/// [`whole_match_regex`]).
pub fn full_match(regex: &Regex, text: &str) -> bool {
    regex.is_match(text)
}

/// Compiles `pattern` (Java's syntax, as far as the two agree) to match whole texts only.
///
/// # Errors
///
/// Not a valid regular expression.
pub fn whole_match_regex(pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| format!("{pattern:?} is not a valid regular expression: {e}"))
}
