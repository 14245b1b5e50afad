//! `json`/`jsonb` values embedded as they are, after a structural check that bounds their depth.

use super::kind::{Kind, ValueError};
use super::numeric::is_json_number;

/// How deeply a `json` value may nest before it is refused (and sent as a string instead).
pub(super) const MAX_JSON_DEPTH: usize = 512;
/// Appends a `json` or `jsonb` value as is, after checking that it is one JSON value.
///
/// PostgreSQL only stores valid JSON, but one bad value would make the whole event unreadable,
/// so the check is worth its single pass.
pub(super) fn write_embedded_json(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    std::str::from_utf8(text).map_err(|_| ValueError::InvalidUtf8)?;
    if !JsonChecker::new(text).check() {
        return Err(Kind::Json.invalid());
    }
    out.extend_from_slice(text);
    Ok(())
}

/// A validator of JSON text (RFC 8259) that needs no allocation: the kinds of the open
/// containers live in a fixed bit stack, which bounds nesting at [`MAX_JSON_DEPTH`].
pub(super) struct JsonChecker<'a> {
    /// The text, already known to be UTF-8.
    text: &'a [u8],
    /// The offset of the next unread byte.
    pos: usize,
    /// One bit per open container, set for an object.
    stack: [u64; MAX_JSON_DEPTH / 64],
    /// How many containers are open.
    depth: usize,
}

impl<'a> JsonChecker<'a> {
    /// Starts checking `text`.
    pub(super) fn new(text: &'a [u8]) -> Self {
        Self {
            text,
            pos: 0,
            stack: [0; MAX_JSON_DEPTH / 64],
            depth: 0,
        }
    }

    /// Whether the text is exactly one JSON value, with optional surrounding whitespace.
    pub(super) fn check(mut self) -> bool {
        self.value_sequence().is_some()
    }

    /// Walks the whole text; `None` on the first error.
    pub(super) fn value_sequence(&mut self) -> Option<()> {
        loop {
            // A value; a non-empty container opens and its first element follows.
            self.whitespace();
            match self.peek()? {
                b'{' => {
                    self.pos += 1;
                    self.whitespace();
                    if self.peek()? == b'}' {
                        self.pos += 1;
                    } else {
                        self.push(true)?;
                        self.key()?;
                        continue;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    self.whitespace();
                    if self.peek()? == b']' {
                        self.pos += 1;
                    } else {
                        self.push(false)?;
                        continue;
                    }
                }
                b'"' => self.string()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close containers, or go on to the next element.
            loop {
                self.whitespace();
                if self.depth == 0 {
                    return (self.pos == self.text.len()).then_some(());
                }
                let in_object = self.top();
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        if in_object {
                            self.whitespace();
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if in_object => {
                        self.pos += 1;
                        self.depth -= 1;
                    }
                    b']' if !in_object => {
                        self.pos += 1;
                        self.depth -= 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// The next byte, without taking it.
    pub(super) fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Takes the next byte.
    pub(super) fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    /// Skips JSON whitespace.
    pub(super) fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Opens a container.
    pub(super) fn push(&mut self, is_object: bool) -> Option<()> {
        let word = self.stack.get_mut(self.depth / 64)?;
        let bit = 1u64 << (self.depth % 64);
        if is_object {
            *word |= bit;
        } else {
            *word &= !bit;
        }
        self.depth += 1;
        Some(())
    }

    /// Whether the innermost open container is an object.
    pub(super) fn top(&self) -> bool {
        let index = self.depth.saturating_sub(1);
        self.stack
            .get(index / 64)
            .is_some_and(|word| word & (1u64 << (index % 64)) != 0)
    }

    /// Reads an object key and its colon.
    pub(super) fn key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.string()?;
        self.whitespace();
        (self.next()? == b':').then_some(())
    }

    /// Reads a string, from its opening quote.
    pub(super) fn string(&mut self) -> Option<()> {
        self.pos += 1;
        loop {
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            if !self.next()?.is_ascii_hexdigit() {
                                return None;
                            }
                        }
                    }
                    _ => return None,
                },
                0x00..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// Reads `true`, `false` or `null`.
    pub(super) fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(word.len())?;
        if self.text.get(self.pos..end)? != word {
            return None;
        }
        self.pos = end;
        Some(())
    }

    /// Reads a number.
    pub(super) fn number(&mut self) -> Option<()> {
        let start = self.pos;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.pos += 1;
        }
        is_json_number(self.text.get(start..self.pos)?).then_some(())
    }
}
