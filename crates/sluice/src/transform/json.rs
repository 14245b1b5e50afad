//! The JSON the transforms work on: a key or a value as Connect's `JsonConverter` wrote it,
//! split into its Connect schema and its value, and objects read one level deep with their
//! members' JSON text kept as it is.
//!
//! Objects are split into members whose values stay JSON text rather than read into a
//! `serde_json::Value`: a `Value` would sort object members (without the crate-wide
//! `preserve_order` feature, which would change every other JSON sluice writes) and reprint
//! numbers (`1.0E-5` from Debezium's doubles would come out as `1e-5`); a transform only moves
//! whole members, so their text is copied unchanged and nothing below the level a transform
//! touches is read at all.

use std::borrow::Cow;

/// A record's key or value as Connect holds it: a schema and a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// Its Connect schema.
    pub schema: Schema,
    /// The value's JSON text; `None`: null.
    pub value: Option<String>,
}

/// A key's or value's Connect schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    /// None (a tombstone's value: Kafka's null).
    None,
    /// One that the converter does not write (schemas disabled): only its presence matters, a
    /// null value with a schema being written as the JSON text `null`, not as Kafka's null.
    Opaque,
    /// The schema as JsonConverter writes it (schemas enabled).
    Json(String),
}

impl Data {
    /// Reads `bytes` as written with (`schemas`) or without Connect's schema envelope.
    ///
    /// # Errors
    ///
    /// The bytes are not JSON of that form.
    pub fn read(bytes: Option<&[u8]>, schemas: bool) -> Result<Self, String> {
        let Some(bytes) = bytes else {
            return Ok(Data {
                schema: Schema::None,
                value: None,
            });
        };
        let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        if !schemas {
            let value = (text.trim() != "null").then(|| text.to_owned());
            return Ok(Data {
                schema: Schema::Opaque,
                value,
            });
        }
        let members = Members::parse(text)?;
        let (Some(schema), Some(payload)) = (members.get("schema"), members.get("payload")) else {
            return Err("expected {\"schema\":…,\"payload\":…}".into());
        };
        let schema = match schema.get() {
            "null" => Schema::None,
            text => Schema::Json(text.to_owned()),
        };
        let value = (payload.get() != "null").then(|| payload.get().to_owned());
        Ok(Data { schema, value })
    }

    /// The bytes to write (`None`: Kafka's null), with (`schemas`) or without the envelope.
    pub fn write(&self, schemas: bool) -> Option<Vec<u8>> {
        match (&self.schema, &self.value) {
            (Schema::None, None) => None,
            (_, value) if !schemas => Some(value.as_deref().unwrap_or("null").as_bytes().to_vec()),
            (schema, value) => {
                let schema = match schema {
                    Schema::Json(text) => text.as_str(),
                    _ => "null",
                };
                let value = value.as_deref().unwrap_or("null");
                let mut out = Vec::with_capacity(schema.len() + value.len() + 24);
                out.extend_from_slice(b"{\"schema\":");
                out.extend_from_slice(schema.as_bytes());
                out.extend_from_slice(b",\"payload\":");
                out.extend_from_slice(value.as_bytes());
                out.push(b'}');
                Some(out)
            }
        }
    }

    /// [`Data::write`] taking the data: without the envelope the text's bytes are moved, not
    /// copied (the chain's last step, once per record).
    pub fn into_bytes(self, schemas: bool) -> Option<Vec<u8>> {
        match (schemas, self.schema, self.value) {
            (_, Schema::None, None) => None,
            (false, _, Some(value)) => Some(value.into_bytes()),
            (false, _, None) => Some(b"null".to_vec()),
            (true, schema, value) => Data { schema, value }.write(true),
        }
    }

    /// A null value with this schema kind (Connect's `newRecord(…, schema, null)`).
    pub fn null_with(schema: Schema) -> Self {
        Data {
            schema,
            value: None,
        }
    }
}

/// An object's members in their order, each member's value as its JSON text.
#[derive(Debug, Default)]
pub struct Members<'a>(pub Vec<(Cow<'a, str>, Raw<'a>)>);

/// A member's value: its JSON text as the object holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// The value's JSON text.
    pub fn get(self) -> &'a str {
        self.0
    }
}

impl<'a> Members<'a> {
    /// Reads the object `text`.
    ///
    /// The text is JSON that sluice's encoders and transforms wrote in this process (the
    /// transforms see nothing else), so only its structure is read: the members' names and
    /// where each value begins and ends, strings and nesting respected; a value's own grammar
    /// (numbers, literals) is not checked again. That is what makes a transform cheap: the
    /// validating parse (`serde_json` into `RawValue`s) was most of a transform's cost
    /// (bench/PROFILE.md), and no crate splits an object without validating or building it.
    /// Malformed text gives an error or odd members, never a panic.
    ///
    /// # Errors
    ///
    /// `text` is not a JSON object.
    pub fn parse(text: &'a str) -> Result<Self, String> {
        split_object(text).ok_or_else(|| format!("expected a JSON object: {}", excerpt(text)))
    }

    /// The member `name`'s JSON text.
    pub fn get(&self, name: &str) -> Option<Raw<'a>> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The object's JSON text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push('{');
        for (n, (name, value)) in self.0.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            push_string(&mut out, name);
            out.push(':');
            out.push_str(value.get());
        }
        out.push('}');
        out
    }
}

/// The elements of the array `text`, read as [`Members::parse`] reads an object; `None`: not
/// an array.
pub fn elements(text: &str) -> Option<Vec<Raw<'_>>> {
    let b = text.as_bytes();
    let mut at = skip_space(b, 0);
    if b.get(at) != Some(&b'[') {
        return None;
    }
    let mut out = Vec::new();
    at = skip_space(b, at + 1);
    if b.get(at) == Some(&b']') {
        return (skip_space(b, at + 1) == b.len()).then_some(out);
    }
    loop {
        let end = value_end(b, at)?;
        out.push(Raw(&text[at..end]));
        at = skip_space(b, end);
        match b.get(at) {
            Some(b',') => at = skip_space(b, at + 1),
            Some(b']') => return (skip_space(b, at + 1) == b.len()).then_some(out),
            _ => return None,
        }
    }
}

/// The start of `text` for an error message.
fn excerpt(text: &str) -> String {
    let end = text.char_indices().nth(40).map_or(text.len(), |(at, _)| at);
    format!(
        "{:?}{}",
        &text[..end],
        if end < text.len() { "…" } else { "" }
    )
}

/// The members of the object `text` (see [`Members::parse`]); `None`: not an object.
fn split_object(text: &str) -> Option<Members<'_>> {
    let b = text.as_bytes();
    let mut at = skip_space(b, 0);
    if b.get(at) != Some(&b'{') {
        return None;
    }
    // Room for a change event's `source` block (17 members) without growing.
    let mut members = Vec::with_capacity(20);
    at = skip_space(b, at + 1);
    if b.get(at) == Some(&b'}') {
        return (skip_space(b, at + 1) == b.len()).then_some(Members(members));
    }
    loop {
        if b.get(at) != Some(&b'"') {
            return None;
        }
        let name_end = string_end(b, at)?;
        let name = &text[at + 1..name_end - 1];
        let name = if name.contains('\\') {
            Cow::Owned(serde_json::from_str::<String>(&text[at..name_end]).ok()?)
        } else {
            Cow::Borrowed(name)
        };
        at = skip_space(b, name_end);
        if b.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_space(b, at + 1);
        let end = value_end(b, start)?;
        members.push((name, Raw(&text[start..end])));
        at = skip_space(b, end);
        match b.get(at) {
            Some(b',') => at = skip_space(b, at + 1),
            Some(b'}') => {
                return (skip_space(b, at + 1) == b.len()).then_some(Members(members));
            }
            _ => return None,
        }
    }
}

fn skip_space(b: &[u8], mut at: usize) -> usize {
    while b
        .get(at)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
    {
        at += 1;
    }
    at
}

/// The end (past the closing quote) of the string starting at `b[at] == b'"'`.
fn string_end(b: &[u8], at: usize) -> Option<usize> {
    let mut from = at + 1;
    loop {
        let found = from + memchr::memchr2(b'"', b'\\', b.get(from..)?)?;
        if b[found] == b'"' {
            return Some(found + 1);
        }
        from = found + 2;
    }
}

/// The end of the value starting at `b[at]`.
fn value_end(b: &[u8], at: usize) -> Option<usize> {
    match *b.get(at)? {
        b'"' => string_end(b, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&c) = b.get(i) {
                match c {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        b',' | b'}' | b']' | b':' => None,
        _ => {
            let mut i = at;
            while b
                .get(i)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
            {
                i += 1;
            }
            Some(i)
        }
    }
}

/// An object built member by member, each value given as JSON text.
#[derive(Debug, Default)]
pub struct ObjectWriter {
    out: String,
    empty: bool,
}

impl ObjectWriter {
    /// An empty object.
    pub fn new() -> Self {
        let mut out = String::with_capacity(256);
        out.push('{');
        ObjectWriter { out, empty: true }
    }

    /// Appends the member `name` with the JSON text `value`.
    pub fn member(&mut self, name: &str, value: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        push_string(&mut self.out, name);
        self.out.push(':');
        self.out.push_str(value);
    }

    /// The object's JSON text.
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// Appends `text` as a JSON string.
pub fn push_string(out: &mut String, text: &str) {
    if !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // Nothing to escape (field names, mostly): no allocation per member.
        out.push('"');
        out.push_str(text);
        out.push('"');
        return;
    }
    // serde_json's escaping (the same as Connect's Jackson for the characters JSON requires).
    out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()));
}

/// `text` as a JSON string.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_string(&mut out, text);
    out
}

/// The text of a JSON value as a header carries it (Connect's `SimpleHeaderConverter`): a
/// string's characters, other values' JSON text; `None` for null.
pub fn header_text(value: &str) -> Option<String> {
    match value {
        "null" => None,
        text if text.starts_with('"') => serde_json::from_str::<String>(text).ok(),
        text => Some(text.to_owned()),
    }
}

/// A JSON string's characters (`None` when `value` is not a string).
pub fn as_str(text: &str) -> Option<Cow<'_, str>> {
    if !text.starts_with('"') {
        return None;
    }
    serde_json::from_str::<Cow<'_, str>>(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_their_order_and_their_text() {
        let text = r#"{"b":1.0E-5,"a":{"x":[1, 2]},"c\"":"v"}"#;
        let members = Members::parse(text).unwrap();
        let names: Vec<&str> = members.0.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["b", "a", "c\""]);
        assert_eq!(members.get("b").unwrap().get(), "1.0E-5");
        assert_eq!(
            members.render(),
            r#"{"b":1.0E-5,"a":{"x":[1, 2]},"c\"":"v"}"#
        );
    }

    #[test]
    fn members_split_strings_nesting_and_space_as_a_parser_does() {
        let text = " {\"a\" : \"x}\\\"]{,\" , \"b\":[1,{\"c\":\"]\"}] ,\"n\":-1.5e3,\"t\":true,\"z\":null,\"o\":{}} ";
        let members = Members::parse(text).unwrap();
        let got: Vec<(&str, &str)> = members
            .0
            .iter()
            .map(|(n, v)| (n.as_ref(), v.get()))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "\"x}\\\"]{,\""),
                ("b", "[1,{\"c\":\"]\"}]"),
                ("n", "-1.5e3"),
                ("t", "true"),
                ("z", "null"),
                ("o", "{}"),
            ]
        );
        assert!(Members::parse("{}").unwrap().0.is_empty());
        assert_eq!(
            elements(" [ 1 , \"a,b\" ,[2]] ")
                .unwrap()
                .iter()
                .map(|r| r.get())
                .collect::<Vec<_>>(),
            ["1", "\"a,b\"", "[2]"]
        );
        assert!(elements("[]").unwrap().is_empty());
    }

    #[test]
    fn malformed_objects_are_errors_not_panics() {
        for text in [
            "",
            "[]",
            "{",
            "{\"a\"",
            "{\"a\":",
            "{\"a\":1",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "{\"a\":\"x}",
            "{\"a\":{\"b\":1}",
            "{\"a\":1} x",
            "{\"a\":\"\\",
            "{\"a\":,}",
            "null",
        ] {
            assert!(
                Members::parse(text).is_err(),
                "{text:?} was read as an object"
            );
        }
    }

    proptest::proptest! {
        /// The splitter finds the members a validating parser finds, with their text, in any
        /// JSON object serde_json writes (compact or pretty).
        #[test]
        fn members_equal_a_validating_parsers(value in json_object(), pretty: bool) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            let members = Members::parse(&text).unwrap();
            let serde_json::Value::Object(map) = &value else { unreachable!() };
            proptest::prop_assert_eq!(members.0.len(), map.len());
            for (name, raw) in &members.0 {
                let expected = &map[name.as_ref()];
                let read: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
                proptest::prop_assert_eq!(&read, expected);
            }
        }
    }

    fn json_object() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            // Binary fractions: serde_json reads them back exactly (not every printed f64).
            (-1_000_000i32..1_000_000).prop_map(|n| serde_json::Value::from(f64::from(n) / 64.0)),
            ".*".prop_map(serde_json::Value::from),
            "[\"\\\\{}\\[\\],: ]{0,6}".prop_map(serde_json::Value::from),
        ];
        let value = leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(".{0,4}", inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        proptest::collection::btree_map("[a-z\"\\\\é]{0,5}", value, 0..6)
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()))
    }

    #[test]
    fn data_reads_and_writes_both_forms() {
        let plain = Data::read(Some(b"{\"a\":1}"), false).unwrap();
        assert_eq!(plain.schema, Schema::Opaque);
        assert_eq!(plain.write(false).unwrap(), b"{\"a\":1}");
        let tombstone = Data::read(None, false).unwrap();
        assert_eq!(tombstone.write(false), None);
        assert_eq!(
            Data::null_with(Schema::Opaque).write(false).unwrap(),
            b"null"
        );
        let with = Data::read(Some(br#"{"schema":{"type":"int32"},"payload":5}"#), true).unwrap();
        assert_eq!(with.schema, Schema::Json(r#"{"type":"int32"}"#.into()));
        assert_eq!(with.value.as_deref(), Some("5"));
        assert_eq!(
            with.write(true).unwrap(),
            br#"{"schema":{"type":"int32"},"payload":5}"#
        );
        // Taking the data writes the same bytes.
        for (data, schemas) in [
            (plain, false),
            (tombstone, false),
            (Data::null_with(Schema::Opaque), false),
            (with, true),
            (Data::null_with(Schema::Json("{}".into())), true),
        ] {
            assert_eq!(data.write(schemas), data.clone().into_bytes(schemas));
        }
    }

    #[test]
    fn header_text_is_a_strings_characters() {
        assert_eq!(header_text("\"a\\\"b\"").as_deref(), Some("a\"b"));
        assert_eq!(header_text("12").as_deref(), Some("12"));
    }
}
