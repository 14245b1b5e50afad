//! Debezium's include/exclude lists are comma-separated regular expressions matched against
//! the whole qualified name (`schema.table`, `schema.table.column`); sluice's lists are globs.
//! A regex converts when its parse tree (regex-syntax's HIR) is made only of literals, `.`,
//! `.*`, `.+`, character classes and alternations of those: each becomes the glob that matches
//! the same names. Anything else (other repetitions, look-arounds) is reported, not guessed.

use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// Splits a Debezium list on commas (Debezium's own split: a comma ends an item; regexes with
/// a comma inside `{m,n}` are not supported by Debezium either).
pub fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The globs that match exactly what `regex` matches as a whole (Debezium anchors the list's
/// regexes at both ends); several when the regex is an alternation at the top. An unescaped
/// `.` between two literal parts (`public.orders`) is taken as the dot it almost always means:
/// the names it could match otherwise hold a dot inside an identifier.
///
/// # Errors
///
/// What in the regex has no glob equivalent.
pub fn to_globs(regex: &str) -> Result<Vec<String>, String> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(regex)
        .map_err(|e| format!("not a valid regular expression: {e}"))?;
    let alternatives = match hir.kind() {
        HirKind::Alternation(alts) => alts.iter().collect::<Vec<_>>(),
        _ => vec![&hir],
    };
    alternatives
        .into_iter()
        .map(|alt| {
            let mut out = String::new();
            glob_of(alt, &mut out)?;
            Ok(out)
        })
        .collect()
}

fn glob_of(hir: &Hir, out: &mut String) -> Result<(), String> {
    match hir.kind() {
        HirKind::Empty => Ok(()),
        HirKind::Literal(literal) => {
            for &byte in literal.0.iter() {
                let c = char::from(byte);
                if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | ',') {
                    out.push('\\');
                }
                out.push(c);
            }
            Ok(())
        }
        HirKind::Class(class) => {
            if is_any(class) {
                out.push('?');
                return Ok(());
            }
            out.push_str(&class_glob(class)?);
            Ok(())
        }
        HirKind::Look(Look::Start | Look::End | Look::StartLF | Look::EndLF) => Ok(()),
        HirKind::Look(look) => Err(format!("the assertion {look:?} has no glob equivalent")),
        HirKind::Repetition(rep) => {
            let any = matches!(rep.sub.kind(), HirKind::Class(class) if is_any(class));
            match (any, rep.min, rep.max) {
                (true, 0, None) => out.push('*'),
                (true, 1, None) => out.push_str("?*"),
                (true, n, Some(m)) if n == m => (0..n).for_each(|_| out.push('?')),
                _ => {
                    return Err(
                        "a repetition other than .* or .+ has no glob equivalent".to_owned()
                    );
                }
            }
            Ok(())
        }
        HirKind::Capture(capture) => glob_of(&capture.sub, out),
        HirKind::Concat(parts) => {
            for (i, part) in parts.iter().enumerate() {
                // `public.orders`: a lone `.` between literals is the separator.
                if let HirKind::Class(class) = part.kind()
                    && is_any(class)
                    && i > 0
                    && i + 1 < parts.len()
                    && matches!(parts[i - 1].kind(), HirKind::Literal(_))
                    && matches!(parts[i + 1].kind(), HirKind::Literal(_))
                {
                    out.push('.');
                    continue;
                }
                glob_of(part, out)?;
            }
            Ok(())
        }
        HirKind::Alternation(alts) => {
            out.push('{');
            for (i, alt) in alts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                glob_of(alt, out)?;
            }
            out.push('}');
            Ok(())
        }
    }
}

/// `.` (any byte but a newline) or `(?s:.)`.
fn is_any(class: &Class) -> bool {
    match class {
        Class::Bytes(bytes) => {
            let ranges: Vec<_> = bytes
                .ranges()
                .iter()
                .map(|r| (r.start(), r.end()))
                .collect();
            ranges == [(0, 0x09), (0x0b, 0xff)] || ranges == [(0, 0xff)]
        }
        Class::Unicode(unicode) => {
            let ranges: Vec<_> = unicode
                .ranges()
                .iter()
                .map(|r| (r.start(), r.end()))
                .collect();
            ranges == [('\0', '\u{9}'), ('\u{b}', '\u{10ffff}')] || ranges == [('\0', '\u{10ffff}')]
        }
    }
}

fn class_glob(class: &Class) -> Result<String, String> {
    let ranges: Vec<(u32, u32)> = match class {
        Class::Bytes(bytes) => bytes
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
        Class::Unicode(unicode) => unicode
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
    };
    let printable =
        |c: u32| (0x21..0x7f).contains(&c) && !matches!(c, 0x5b | 0x5d | 0x21 | 0x5c | 0x2d);
    let mut out = String::from("[");
    for (start, end) in ranges {
        if !printable(start) || !printable(end) {
            return Err("a character class with characters a glob class cannot hold".to_owned());
        }
        out.push(char::from_u32(start).unwrap_or('?'));
        if end != start {
            out.push('-');
            out.push(char::from_u32(end).unwrap_or('?'));
        }
    }
    out.push(']');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::glob_matches;

    #[test]
    fn what_converts_matches_the_same_names() {
        let cases = [
            ("public\\.orders", vec!["public.orders"]),
            ("public.orders", vec!["public.orders"]),
            ("public\\..*", vec!["public.*"]),
            ("^inventory\\.customers$", vec!["inventory.customers"]),
            ("public\\.(orders|items)", vec!["public.{orders,items}"]),
            (
                "public\\.orders|public\\.items",
                vec!["public.orders", "public.items"],
            ),
            ("shop\\.audit_.+", vec!["shop.audit_?*"]),
            ("shop\\.t[0-9]", vec!["shop.t[0-9]"]),
        ];
        for (regex, globs) in cases {
            assert_eq!(to_globs(regex).unwrap(), globs, "{regex}");
        }
        // The converted globs agree with the regex on names around them.
        let names = [
            "public.orders",
            "public.items",
            "public.order",
            "publicxorders",
            "shop.audit_",
            "shop.audit_x",
            "shop.t1",
            "shop.tx",
        ];
        for regex in [
            "public\\.(orders|items)",
            "shop\\.audit_.+",
            "shop\\.t[0-9]",
            "public\\..*",
        ] {
            let re = regex_automata::meta::Regex::new(&format!("^(?:{regex})$")).unwrap();
            let globs = to_globs(regex).unwrap();
            for name in names {
                assert_eq!(
                    re.is_match(name),
                    globs.iter().any(|g| glob_matches(g, name)),
                    "{regex} vs {globs:?} on {name}"
                );
            }
        }
    }

    #[test]
    fn what_does_not_convert_says_why() {
        assert!(
            to_globs("public\\.t[0-9]+")
                .unwrap_err()
                .contains("repetition")
        );
        assert!(
            to_globs("public\\.(?!tmp).*")
                .unwrap_err()
                .contains("regular expression")
        );
        assert!(to_globs("a\\bb").unwrap_err().contains("glob"));
    }

    #[test]
    fn lists_split_on_commas() {
        assert_eq!(
            split_list(" public\\.a , public\\.b,"),
            vec!["public\\.a", "public\\.b"]
        );
    }
}
