//! Strings, `bytea` and `hstore`: text-like values to JSON strings in their encodings.

use super::kind::{Kind, ValueError};
use crate::event::BinaryHandlingMode;
use crate::event::HstoreHandlingMode;
use crate::event::needs_escape;
use crate::event::push_escape;
use crate::event::write_escaped;
use base64::Engine as _;

/// Decoded bytes per base64 chunk: a multiple of 3, so only the last chunk is padded.
pub(super) const BYTEA_CHUNK: usize = 768;
/// Appends an `hstore` value (`"k"=>"v", "n"=>NULL`) as `hstore_handling_mode` writes it.
///
/// # Errors
///
/// Text that is not an `hstore` value; `out` is left as it was.
pub(crate) fn write_hstore(
    text: &[u8],
    out: &mut Vec<u8>,
    mode: HstoreHandlingMode,
) -> Result<(), ValueError> {
    let pairs = parse_hstore(text).ok_or(ValueError::Invalid {
        type_name: "hstore",
    })?;
    mode.write(&pairs, out);
    Ok(())
}

/// Parses `hstore`'s output: `"key"=>"value"` pairs (or `=>NULL`) separated by `, `, strings
/// double-quoted with `\` escaping `"` and `\`.
pub(super) fn parse_hstore(text: &[u8]) -> Option<Vec<(String, Option<String>)>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut chars = text.chars().peekable();
    let mut pairs = Vec::new();
    let skip_ws = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            chars.next();
        }
    };
    let quoted = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> Option<String> {
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(value),
                '\\' => value.push(chars.next()?),
                c => value.push(c),
            }
        }
    };
    skip_ws(&mut chars);
    while chars.peek().is_some() {
        let key = quoted(&mut chars)?;
        skip_ws(&mut chars);
        if chars.next()? != '=' || chars.next()? != '>' {
            return None;
        }
        skip_ws(&mut chars);
        let value = if chars.peek() == Some(&'"') {
            Some(quoted(&mut chars)?)
        } else {
            for expected in ['N', 'U', 'L', 'L'] {
                if chars.next()?.to_ascii_uppercase() != expected {
                    return None;
                }
            }
            None
        };
        pairs.push((key, value));
        skip_ws(&mut chars);
        match chars.next() {
            None => break,
            Some(',') => skip_ws(&mut chars),
            Some(_) => return None,
        }
    }
    Some(pairs)
}

/// Appends `text`, which must be UTF-8, as a JSON string.
pub(super) fn write_string(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    std::str::from_utf8(text).map_err(|_| ValueError::InvalidUtf8)?;
    out.push(b'"');
    write_escaped(text, out);
    out.push(b'"');
    Ok(())
}

/// Appends text known to need no escaping (digits, letters, signs) as a JSON string.
pub(super) fn write_ascii_string(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(text);
    out.push(b'"');
}

/// Appends the body of a JSON string for an array element that still holds PostgreSQL's
/// backslash escapes: each backslash is dropped and the byte after it taken literally.
pub(super) fn write_escaped_unquoting(element: &[u8], out: &mut Vec<u8>) {
    let mut bytes = element.iter();
    while let Some(&byte) = bytes.next() {
        let byte = if byte == b'\\' {
            match bytes.next() {
                Some(&escaped) => escaped,
                None => break,
            }
        } else {
            byte
        };
        if needs_escape(byte) {
            push_escape(byte, out);
        } else {
            out.push(byte);
        }
    }
}

/// Appends a `bytea` in hex format (`\x0a0b…`) as a string in `binary_handling_mode`'s
/// encoding: base64 (standard or URL-safe alphabet, padded) or lowercase hex.
pub(super) fn write_bytea(
    mode: BinaryHandlingMode,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    let invalid = Kind::Bytea(mode).invalid();
    let hex = text.strip_prefix(b"\\x").ok_or(invalid)?;
    if !hex.len().is_multiple_of(2) {
        return Err(invalid);
    }
    let Some(engine) = mode.base64_engine() else {
        if !hex.iter().all(|b| hex_digit(*b).is_some()) {
            return Err(invalid);
        }
        out.push(b'"');
        out.extend(hex.iter().map(u8::to_ascii_lowercase));
        out.push(b'"');
        return Ok(());
    };
    let encoded_len =
        base64::encoded_len(hex.len() / 2, true).ok_or(Kind::Bytea(mode).out_of_range())?;
    out.push(b'"');
    let start = out.len();
    out.resize(start.saturating_add(encoded_len), 0);
    let mut written = 0;
    let mut chunk = [0u8; BYTEA_CHUNK];
    for pairs in hex.chunks(BYTEA_CHUNK * 2) {
        let mut len = 0;
        for (slot, pair) in chunk.iter_mut().zip(pairs.chunks_exact(2)) {
            let [high, low] = pair else {
                return Err(invalid);
            };
            *slot = (hex_digit(*high).ok_or(invalid)? << 4) | hex_digit(*low).ok_or(invalid)?;
            len += 1;
        }
        let input = chunk.get(..len).ok_or(invalid)?;
        let target = out.get_mut(start + written..).ok_or(invalid)?;
        written += engine.encode_slice(input, target).map_err(|_| invalid)?;
    }
    out.truncate(start + written);
    out.push(b'"');
    Ok(())
}

/// The value of one hexadecimal digit.
pub(super) fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}
