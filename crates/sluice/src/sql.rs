//! The SQL text sluice writes itself, in one place: identifiers quoted for PostgreSQL and
//! MySQL/MariaDB, conditions from outside (row filters, incremental snapshot requests) checked
//! before they are put in a statement, and values bound as parameters in text form.
//!
//! The rules every statement follows:
//! - **values are parameters** (`$n` / `?`), never text spliced into the statement; where a
//!   value's type is only known to the server, [`TextParam`] binds it in text form and the
//!   server converts it as it would a literal;
//! - **identifiers** go through [`quote_ident`] (PostgreSQL) or [`quote_mysql_ident`];
//! - **a condition from outside** (a row filter of the pipeline file, a request's filter from
//!   the signal table or the admin API) passes [`check_condition`] and is run in one
//!   extended-protocol (prepared) statement, which the server parses as exactly one statement,
//!   inside a read-only transaction;
//! - every PostgreSQL connection runs with `standard_conforming_strings = on` (see
//!   [`crate::pg_connect`]), so the few literals of fixed text sluice writes mean what they say.

use bytes::BytesMut;
use tokio_postgres::types::{Format, IsNull, ToSql, Type};

/// A PostgreSQL identifier in double quotes (a `"` in it doubled).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A MySQL/MariaDB identifier in backquotes (a `` ` `` in it doubled).
pub fn quote_mysql_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A PostgreSQL string literal (a `'` in it doubled), for the replication command grammar only,
/// which takes no parameters. Correct only with `standard_conforming_strings = on`, which every
/// connection of sluice's pins.
pub fn quote_pg_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A PostgreSQL escape-string literal (`E'…'`) of `value`, for commands sluice shows an
/// operator to run in a session of their own (whose `standard_conforming_strings` it cannot
/// know: an `E'…'` literal means the same under either setting). `\` and `'` are escaped, and
/// control characters written as `\n`, `\r`, `\t` or `\xHH`, so the text stays on one line.
pub fn pg_escape_literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 3);
    out.push_str("E'");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A value bound in text form, of whatever type the server infers for its parameter (declare
/// the parameter [`Type::UNKNOWN`] or cast it, `$1::int8`): the server converts it with the
/// type's input function, as it would a literal, but it is never part of the statement's text.
#[derive(Debug, Clone, Copy)]
pub struct TextParam<'a>(pub &'a str);

impl ToSql for TextParam<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

/// The text form of column `quoted` (already quoted) as its type's output function writes it
/// (as a simple query or pgoutput would send it), as a `text` result column of an
/// extended-protocol query: NULL stays NULL (`num_nulls` looks at the value, not at a
/// composite's fields).
pub fn pg_text_output(quoted: &str) -> String {
    format!(
        "CASE WHEN pg_catalog.num_nulls({quoted}) = 0 THEN pg_catalog.format('%s', {quoted}) END"
    )
}

/// What [`check_condition`] is reading outside quotes.
#[derive(Debug, Clone, Copy)]
enum Word {
    None,
    /// An identifier or keyword: its first character and length so far.
    Ident {
        first: char,
        len: usize,
    },
    Number,
}

/// The SQL dialect a condition is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlDialect {
    /// PostgreSQL (with `standard_conforming_strings = on`).
    Postgres,
    /// MySQL/MariaDB.
    Mysql,
}

/// Checks that `condition` is one SQL expression that cannot end the `WHERE … AND (…)` it is
/// put in: not empty; parentheses balanced outside quotes (never more `)` than `(` so far); no
/// `;`; no comments (`--`, `/*`, and MySQL's `#`); every quote closed. PostgreSQL: no dollar
/// quotes (nor `$n` parameters), and `E'…'` strings read with their backslash escapes. MySQL: no
/// backslash inside a quoted string (whether it escapes depends on the server's `sql_mode`).
///
/// This is the first line only: the statement a condition is put in is also run as one
/// extended-protocol statement (which the server refuses to split) in a read-only transaction.
///
/// # Errors
///
/// What is wrong, to follow "the filter …" in a message.
pub fn check_condition(dialect: SqlDialect, condition: &str) -> Result<(), &'static str> {
    if condition.trim().is_empty() {
        return Err("is empty");
    }
    if condition.contains('\0') {
        return Err("contains a NUL character");
    }
    let mut depth = 0usize;
    // The word being read outside quotes: an identifier or keyword (letters, digits, `_`, `$`)
    // or a number, and its first character (a lone `E` before a quote starts an escape string).
    let mut word = Word::None;
    let mut chars = condition.chars().peekable();
    while let Some(c) = chars.next() {
        let previous = word;
        word = match (previous, c) {
            (Word::Ident { first, len }, c)
                if c.is_alphanumeric() || c == '_' || c == '$' || !c.is_ascii() =>
            {
                Word::Ident {
                    first,
                    len: len + 1,
                }
            }
            (Word::Number, c) if c.is_alphanumeric() || c == '_' || c == '.' => Word::Number,
            (_, c) if c.is_alphabetic() || c == '_' || !c.is_ascii() => {
                Word::Ident { first: c, len: 1 }
            }
            (_, c) if c.is_ascii_digit() => Word::Number,
            _ => Word::None,
        };
        match c {
            '`' if dialect == SqlDialect::Postgres => {} // an operator character at most
            '\'' | '"' | '`' => {
                let quote = c;
                // PostgreSQL: E'…' has backslash escapes; identifiers never do.
                let escapes = dialect == SqlDialect::Postgres
                    && quote == '\''
                    && matches!(
                        previous,
                        Word::Ident {
                            first: 'E' | 'e',
                            len: 1
                        }
                    );
                loop {
                    match chars.next() {
                        Some(q) if q == quote => {
                            if chars.peek() == Some(&quote) {
                                chars.next();
                            } else {
                                break;
                            }
                        }
                        Some('\\') if escapes => {
                            chars.next();
                        }
                        Some('\\') if dialect == SqlDialect::Mysql && quote != '`' => {
                            return Err(
                                "has a backslash in a quoted string (whether it escapes depends on the server's sql_mode): write the value without it",
                            );
                        }
                        Some(_) => {}
                        None => return Err("has an unterminated quote"),
                    }
                }
                word = Word::None;
            }
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1).ok_or("has a ')' without its '('")?;
            }
            ';' => return Err("contains ';'"),
            '-' if chars.peek() == Some(&'-') => return Err("contains a comment"),
            '/' if chars.peek() == Some(&'*') => return Err("contains a comment"),
            '#' if dialect == SqlDialect::Mysql => return Err("contains a comment"),
            // Inside an identifier `$` is a letter; anywhere else it starts a dollar quote or
            // a parameter.
            '$' if dialect == SqlDialect::Postgres
                && !matches!(word, Word::Ident { len: 2.., .. }) =>
            {
                return Err("contains '$' (a dollar quote or a parameter)");
            }
            _ => {}
        }
    }
    if depth == 0 {
        Ok(())
    } else {
        Err("has a '(' without its ')'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escape_literal_keeps_quotes_backslashes_and_control_characters_inside() {
        assert_eq!(pg_escape_literal("it's"), "E'it''s'");
        assert_eq!(pg_escape_literal(r"a\'b"), r"E'a\\''b'");
        assert_eq!(
            pg_escape_literal("one\ntwo\r\t\u{1}\u{7f}é"),
            r"E'one\ntwo\r\t\x01\x7fé'"
        );
    }

    #[test]
    fn identifiers_are_quoted_with_their_quotes_doubled() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_ident("Order"), "\"Order\"");
        assert_eq!(quote_mysql_ident("a`b"), "`a``b`");
        assert_eq!(quote_pg_literal("it's"), "'it''s'");
    }

    #[test]
    fn plain_conditions_pass() {
        for condition in [
            "id > 10",
            "region = 'eu' AND (amount > 5 OR note IS NULL)",
            "name = 'it''s'",
            "\"Odd;Name\" = 1",
            "note = 'a -- not a comment; /* nor this */'",
            "price$usd > 3",
            "E'\\\\' = x",
            "id IN (SELECT id FROM other)",
            "a - -1 > 0",
            "a1$$ = 2",
            "1e5 < x",
        ] {
            assert_eq!(
                check_condition(SqlDialect::Postgres, condition),
                Ok(()),
                "{condition}"
            );
        }
        for condition in [
            "id > 10",
            "`odd;name` = 'x''y'",
            "region = \"eu\"",
            "a - -1 > 0",
        ] {
            assert_eq!(
                check_condition(SqlDialect::Mysql, condition),
                Ok(()),
                "{condition}"
            );
        }
    }

    #[test]
    fn conditions_that_could_end_their_statement_are_refused() {
        let pg = |c: &str| check_condition(SqlDialect::Postgres, c);
        assert_eq!(pg(""), Err("is empty"));
        assert_eq!(pg("true; DROP TABLE t"), Err("contains ';'"));
        assert_eq!(pg("true) OR (true"), Err("has a ')' without its '('"));
        assert_eq!(pg("(true"), Err("has a '(' without its ')'"));
        assert_eq!(pg("true -- x"), Err("contains a comment"));
        assert_eq!(pg("true /* x */"), Err("contains a comment"));
        assert_eq!(pg("x = 'open"), Err("has an unterminated quote"));
        assert_eq!(pg("x = \"open"), Err("has an unterminated quote"));
        assert_eq!(
            pg("x = $$a'b$$"),
            Err("contains '$' (a dollar quote or a parameter)")
        );
        assert_eq!(
            pg("x = $t$;$t$"),
            Err("contains '$' (a dollar quote or a parameter)")
        );
        assert_eq!(
            pg("x = $1"),
            Err("contains '$' (a dollar quote or a parameter)")
        );
        assert_eq!(
            pg("1$$x$$ = y"),
            Err("contains '$' (a dollar quote or a parameter)")
        );
        // E'\'' is one quote: what follows is outside the string.
        assert_eq!(pg("x = E'\\'' ; DELETE FROM t; --'"), Err("contains ';'"));
        assert_eq!(pg("x = e'\\'' ) OR ('"), Err("has a ')' without its '('"));
        // Not an escape string: `name'…'` is no E prefix.
        assert_eq!(pg("rate = 'x\\' OR 1=1"), Ok(()));
        assert_eq!(pg("x = 'a\0'"), Err("contains a NUL character"));
        let my = |c: &str| check_condition(SqlDialect::Mysql, c);
        assert_eq!(my("id > 1 # x"), Err("contains a comment"));
        assert_eq!(my("id > 1 -- x"), Err("contains a comment"));
        assert_eq!(my("id > 1; DO 1"), Err("contains ';'"));
        assert!(my("x = 'a\\' ; DO 1; '").is_err());
        assert!(my("x = \"a\\\" ; DO 1; \"").is_err());
        assert_eq!(my("x = `a"), Err("has an unterminated quote"));
    }
}
