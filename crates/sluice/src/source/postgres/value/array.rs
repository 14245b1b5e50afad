//! PostgreSQL array literals to JSON arrays, element by element, bounded in dimensions and depth.

use super::cursor::Cursor;
use super::kind::{Kind, ValueError};
use super::scalar::write_scalar;
use super::text::write_escaped_unquoting;
use crate::event::write_escaped;

/// The most dimensions a PostgreSQL array can have (`MAXDIM`).
pub(super) const MAX_ARRAY_DIMENSIONS: usize = 6;
/// Appends an array literal (`{1,2,NULL}`, `[0:1]={a,b}`, quoted elements with backslash
/// escapes) as a JSON array, each element mapped as a value of `element` with the column's
/// type modifier. As Debezium: a multi-dimensional array is its outer list with every
/// sub-array `null`; returns `false` (the caller writes `null` instead) when Debezium cannot
/// convert an element — a `numeric` NaN or infinity, an enum array's NULL.
pub(super) fn write_array(
    element: Kind,
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, ValueError> {
    /// Where the parser is within a list.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum State {
        /// Just after `{`: an element, a sub-array or `}`.
        Opened,
        /// After `,`: an element or a sub-array.
        Element,
        /// After an element or a sub-array: `,` or `}`.
        Separator,
    }

    let invalid = ValueError::Invalid { type_name: "array" };
    if element.is_text() {
        // Escaping works on bytes, so string elements are checked once, here.
        std::str::from_utf8(text).map_err(|_| ValueError::InvalidUtf8)?;
    }
    let mut pos = skip_dimensions(text).ok_or(invalid)?;
    pos = skip_whitespace(text, pos);
    if text.get(pos) != Some(&b'{') {
        return Err(invalid);
    }
    pos += 1;
    out.push(b'[');
    let mut depth = 1;
    let mut state = State::Opened;
    // Unescaped elements that are parsed as values go here; allocated only if one is needed.
    let mut scratch = Vec::new();
    while depth > 0 {
        pos = skip_whitespace(text, pos);
        let byte = *text.get(pos).ok_or(invalid)?;
        match (state, byte) {
            (State::Opened | State::Separator, b'}') => {
                out.push(b']');
                pos += 1;
                depth -= 1;
                state = State::Separator;
            }
            (State::Separator, b',') => {
                out.push(b',');
                pos += 1;
                state = State::Element;
            }
            (State::Separator, _) => return Err(invalid),
            (_, b'{') => {
                // A sub-array: Debezium's element is null.
                pos = skip_sub_array(text, pos).ok_or(invalid)?;
                out.extend_from_slice(b"null");
                state = State::Separator;
            }
            (_, b'"') => {
                let (raw, escaped, end) = quoted_element(text, pos + 1).ok_or(invalid)?;
                if matches!(element, Kind::Numeric | Kind::NumericPrecise)
                    && matches!(raw, b"NaN" | b"Infinity" | b"-Infinity")
                {
                    return Ok(false);
                }
                write_element(element, type_modifier, raw, escaped, out, &mut scratch)?;
                pos = end;
                state = State::Separator;
            }
            (_, b',' | b'}') => return Err(invalid),
            _ => {
                let (raw, escaped, end) = unquoted_element(text, pos).ok_or(invalid)?;
                if !escaped && raw.eq_ignore_ascii_case(b"NULL") {
                    if element == Kind::EnumText {
                        return Ok(false);
                    }
                    out.extend_from_slice(b"null");
                } else if matches!(element, Kind::Numeric | Kind::NumericPrecise)
                    && matches!(raw, b"NaN" | b"Infinity" | b"-Infinity")
                {
                    return Ok(false);
                } else {
                    write_element(element, type_modifier, raw, escaped, out, &mut scratch)?;
                }
                pos = end;
                state = State::Separator;
            }
        }
    }
    if skip_whitespace(text, pos) != text.len() {
        return Err(invalid);
    }
    Ok(true)
}

/// The position after the sub-array that starts (`{`) at `start`, nested at most
/// [`MAX_ARRAY_DIMENSIONS`] deep, quoted elements skipped whole.
pub(super) fn skip_sub_array(text: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0;
    let mut pos = start;
    loop {
        match *text.get(pos)? {
            b'{' => {
                depth += 1;
                if depth >= MAX_ARRAY_DIMENSIONS {
                    return None;
                }
                pos += 1;
            }
            b'}' => {
                depth -= 1;
                pos += 1;
                if depth == 0 {
                    return Some(pos);
                }
            }
            b'"' => pos = quoted_element(text, pos + 1)?.2,
            b'\\' => pos += 2,
            _ => pos += 1,
        }
    }
}

/// Skips the optional dimension decoration (`[1:2][0:3]=`) of an array literal; returns where
/// the literal proper starts.
pub(super) fn skip_dimensions(text: &[u8]) -> Option<usize> {
    if text.first() != Some(&b'[') {
        return Some(0);
    }
    let mut cursor = Cursor::new(text);
    while cursor.eat(b'[') {
        cursor.eat(b'-');
        cursor.number(1, 10)?;
        if !cursor.eat(b':') {
            return None;
        }
        cursor.eat(b'-');
        cursor.number(1, 10)?;
        if !cursor.eat(b']') {
            return None;
        }
    }
    cursor.eat(b'=').then_some(cursor.pos)
}

/// The position of the first byte at or after `pos` that is not ASCII whitespace.
pub(super) fn skip_whitespace(text: &[u8], mut pos: usize) -> usize {
    while text.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

/// Finds the end of a quoted element whose content starts at `start`: returns the raw content
/// (escapes still in), whether it holds escapes, and the position after the closing quote.
pub(super) fn quoted_element(text: &[u8], start: usize) -> Option<(&[u8], bool, usize)> {
    let mut pos = start;
    let mut escaped = false;
    loop {
        match *text.get(pos)? {
            b'"' => return Some((text.get(start..pos)?, escaped, pos + 1)),
            b'\\' => {
                escaped = true;
                // The escaped byte must exist; it is taken literally.
                text.get(pos + 1)?;
                pos += 2;
            }
            _ => pos += 1,
        }
    }
}

/// Finds the end of an unquoted element starting at `start` (at a non-whitespace byte): it
/// runs to the next unescaped `,` or `}`, less trailing whitespace. Returns the raw content,
/// whether it holds escapes, and the position after it.
pub(super) fn unquoted_element(text: &[u8], start: usize) -> Option<(&[u8], bool, usize)> {
    let mut pos = start;
    let mut escaped = false;
    // The end of the content so far, past its last non-whitespace (or escaped) byte.
    let mut end = start;
    loop {
        match *text.get(pos)? {
            b',' | b'}' => break,
            b'{' | b'"' => return None,
            b'\\' => {
                escaped = true;
                text.get(pos + 1)?;
                pos += 2;
                end = pos;
            }
            byte => {
                pos += 1;
                if !byte.is_ascii_whitespace() {
                    end = pos;
                }
            }
        }
    }
    Some((text.get(start..end)?, escaped, end))
}

/// Appends one non-null array element: string elements are unescaped straight into the
/// output; others are unescaped into `scratch` first when they hold escapes, then mapped.
pub(super) fn write_element(
    element: Kind,
    type_modifier: i32,
    raw: &[u8],
    escaped: bool,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), ValueError> {
    if element.is_text() {
        out.push(b'"');
        if escaped {
            write_escaped_unquoting(raw, out);
        } else {
            write_escaped(raw, out);
        }
        out.push(b'"');
        return Ok(());
    }
    if !escaped {
        return write_scalar(element, type_modifier, raw, out);
    }
    scratch.clear();
    let mut bytes = raw.iter();
    while let Some(&byte) = bytes.next() {
        if byte == b'\\' {
            match bytes.next() {
                Some(&escaped) => scratch.push(escaped),
                None => break,
            }
        } else {
            scratch.push(byte);
        }
    }
    write_scalar(element, type_modifier, scratch, out)
}
