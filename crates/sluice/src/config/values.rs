//! The value forms keys take: byte sizes ("64MiB"), globs, `schema.table` names, identifiers and
//! topic names.

use serde::Deserialize;

/// A size in bytes from the pipeline file: an integer, or a string of a number and a unit
/// (`B`, `KiB`, `MiB`, `GiB`; `KB`, `MB`, `GB` as powers of 1000).
pub fn deserialize_byte_size<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(deserializer).map_err(|_| {
        serde::de::Error::custom(
            "expected a size: bytes as an integer, or a string like \"128MiB\"",
        )
    })? {
        Size::Bytes(n) => Ok(n),
        Size::Text(text) => parse_byte_size(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?}: expected a size like \"128MiB\", \"1GiB\" or a number of bytes"
            ))
        }),
    }
}

/// `"128MiB"`, `"1 GiB"`, `"4096"` → bytes (see [`deserialize_byte_size`]).
pub fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// A glob over dotted names (`*` matches any characters, dots included).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .is_ok_and(|glob| glob.compile_matcher().is_match(name))
}

/// Splits `schema.table`.
pub fn parse_table_name(name: &str) -> Option<(&str, &str)> {
    let (schema, table) = name.split_once('.')?;
    (!schema.is_empty() && !table.is_empty() && !table.contains('.')).then_some((schema, table))
}

pub(crate) fn is_identifier(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A byte count for messages: `12.3 MiB`.
pub fn human_bytes(bytes: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

pub(crate) fn is_topic_name(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
