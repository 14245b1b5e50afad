//! Kafka's `RegexRouter`: a new topic from the old one by a regular expression.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use regex_automata::meta::Regex;

use super::record::Record;

/// `RegexRouter`: a topic matching `regex` as a whole becomes `replacement`, with `$1`… (and
/// `${name}`) replaced by the groups, as Java's `Matcher.replaceFirst` does.
#[derive(Debug)]
pub struct RegexRouter {
    regex: Regex,
    /// In regex-automata's interpolation syntax.
    replacement: String,
    /// Topics routed so far: every record of a topic takes the same route, so the expression
    /// runs once per topic rather than once per record (it was a tenth of the chain's cost in
    /// bench/run --transforms). Bounded by [`ROUTE_CACHE`] topics.
    routes: RwLock<HashMap<Arc<str>, Arc<str>>>,
}

/// The most topics [`RegexRouter`] remembers routes for (a pipeline has far fewer).
const ROUTE_CACHE: usize = 4096;

impl RegexRouter {
    /// A router from the configured `regex` and Java `replacement`.
    ///
    /// # Errors
    ///
    /// `regex` is not a valid regular expression.
    pub fn new(regex: &str, replacement: &str) -> Result<Self, String> {
        Ok(Self {
            regex: super::predicate::whole_match_regex(regex)?,
            replacement: java_replacement(replacement),
            routes: RwLock::default(),
        })
    }

    /// The record with its topic routed.
    pub fn apply(&self, mut record: Record) -> Record {
        record.topic = self.route_cached(&record.topic);
        record
    }

    /// `topic` routed, from the routes remembered when it was seen before.
    pub fn route_cached(&self, topic: &Arc<str>) -> Arc<str> {
        let known = self
            .routes
            .read()
            .ok()
            .and_then(|routes| routes.get(&**topic).cloned());
        if let Some(routed) = known {
            return routed;
        }
        let routed = self.route(topic);
        let routed = if *routed == **topic {
            Arc::clone(topic)
        } else {
            Arc::from(routed)
        };
        if let Ok(mut routes) = self.routes.write()
            && routes.len() < ROUTE_CACHE
        {
            routes.insert(Arc::clone(topic), Arc::clone(&routed));
        }
        routed
    }

    /// `topic` routed (unchanged when it does not match).
    pub fn route(&self, topic: &str) -> String {
        self.route_matching(topic)
            .unwrap_or_else(|| topic.to_owned())
    }

    /// `text` replaced when it matches as a whole, `None` when it does not.
    pub fn route_matching(&self, text: &str) -> Option<String> {
        let mut captures = self.regex.create_captures();
        self.regex.captures(text, &mut captures);
        if !captures.is_match() {
            return None;
        }
        let mut out = String::with_capacity(self.replacement.len() + 16);
        captures.interpolate_string_into(text, &self.replacement, &mut out);
        Some(out)
    }
}

/// Java's replacement syntax (`$1`, `${name}`, `\$` for a literal `$`) in regex-automata's
/// (`${1}`, `${name}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len() + 4);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str("${");
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    out.push(d);
                    chars.next();
                }
                out.push('}');
            }
            '$' if chars.peek() == Some(&'{') => out.push('$'),
            '$' => out.push_str("$$"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_whole_matches_with_javas_replacement_syntax() {
        let router = RegexRouter::new(r"([^.]+)\.([^.]+)\.([^.]+)", "$3").unwrap();
        assert_eq!(router.route("dbserver1.public.orders"), "orders");
        assert_eq!(router.route("not.routed"), "not.routed");
        let merged = RegexRouter::new(r"p\.public\.orders_(\d+)", "p.orders\\$all_$1").unwrap();
        assert_eq!(merged.route("p.public.orders_2024"), "p.orders$all_2024");
        // Only a whole match routes (Java's Matcher.matches).
        let partial = RegexRouter::new("orders", "x").unwrap();
        assert_eq!(partial.route("p.public.orders"), "p.public.orders");
        let named = RegexRouter::new(r"(?P<t>[a-z]+)\.x", "${t}_y").unwrap();
        assert_eq!(named.route("abc.x"), "abc_y");
    }
}
