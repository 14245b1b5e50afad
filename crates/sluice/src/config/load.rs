//! Loading a pipeline file: read it, parse the TOML (nesting bounded), replace `${NAME}`,
//! `${NAME:-default}` and `${file:PATH}` in every string, and deserialize strictly; every
//! problem becomes a [`ConfigError`] that names the key and never quotes a secret.

use std::path::Path;

use crate::error::ConfigIssue;

/// The pipeline file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read pipeline file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML. Only the place and the parser's message are kept: the
    /// parser's own report quotes the line, which may hold a password.
    #[error("pipeline file {path} is not valid TOML: {location}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// `line L, column C`.
        location: String,
        /// What the parser expected.
        message: String,
    },
    /// Keys are unknown, values of the wrong form, or rules broken.
    #[error("pipeline file {path} is invalid:\n{}", format_issues(.issues))]
    Invalid {
        /// The file.
        path: String,
        /// Every problem found.
        issues: Vec<ConfigIssue>,
    },
}

fn format_issues(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(|issue| format!("  - {issue}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Looks up an environment variable for `${…}`.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;
/// A pipeline type's `from_toml(text, origin, env)`.
type ParseFn<T> = fn(&str, &str, EnvLookup<'_>) -> Result<T, ConfigError>;

/// Reads a pipeline file and parses it with `parse` (the environment fills `${…}`).
pub(crate) fn load_file<T>(path: &Path, parse: ParseFn<T>) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string(), &|name| {
        std::env::var(name).ok()
    })
}

/// The three steps of loading (see the module docs) for a pipeline type: parse and
/// interpolate, deserialize strictly, validate; every issue names its key. `prepare` runs
/// between the last two (a source taking over the transforms it applies itself); its issues
/// end the loading.
pub(crate) fn parse_pipeline<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
    env: &dyn Fn(&str) -> Option<String>,
    prepare: fn(&mut T) -> Vec<ConfigIssue>,
    validate: fn(&T) -> Vec<ConfigIssue>,
) -> Result<T, ConfigError> {
    let invalid = |issues| ConfigError::Invalid {
        path: origin.to_owned(),
        issues,
    };
    let value = parse_interpolated(text, origin, env)?;
    let mut config: T = deserialize_strict(value).map_err(invalid)?;
    let issues = prepare(&mut config);
    if !issues.is_empty() {
        return Err(invalid(issues));
    }
    let issues = validate(&config);
    if issues.is_empty() {
        Ok(config)
    } else {
        Err(invalid(issues))
    }
}

/// Parses TOML text and replaces `${…}` in every string; the issues name the keys.
pub(crate) fn parse_interpolated(
    text: &str,
    origin: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<toml::Value, ConfigError> {
    let mut value: toml::Value = parse_toml(text, origin)?;
    let mut issues = Vec::new();
    interpolate(&mut value, &mut String::new(), env, &mut issues);
    if issues.is_empty() {
        Ok(value)
    } else {
        Err(ConfigError::Invalid {
            path: origin.to_owned(),
            issues,
        })
    }
}

/// Parses TOML text; a syntax error names the place, never the text there (it may be a
/// password).
pub(crate) fn parse_toml(text: &str, origin: &str) -> Result<toml::Value, ConfigError> {
    // The TOML parser recurses once per level of arrays and inline tables, without a limit:
    // 100,000 levels overflow the stack (a crash, not an error).
    if let Some(at) = too_deep(text) {
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
        return Err(ConfigError::Syntax {
            path: origin.to_owned(),
            location: format!("line {line}, column {column}"),
            message: format!("arrays and inline tables nested more than {MAX_TOML_NESTING} deep"),
        });
    }
    toml::from_str(text).map_err(|error| {
        let location = match error.span() {
            Some(span) => {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
                format!("line {line}, column {column}")
            }
            None => "somewhere".to_owned(),
        };
        ConfigError::Syntax {
            path: origin.to_owned(),
            location,
            message: error.message().trim_end().to_owned(),
        }
    })
}

/// The deepest nesting of arrays and inline tables a pipeline file may have (a real file nests
/// a few levels; the parser's own limit, about 80, reports an error but does not stop it from
/// recursing on).
const MAX_TOML_NESTING: usize = 64;

/// The byte offset of the first `[` or `{` nested deeper than [`MAX_TOML_NESTING`], outside
/// strings and comments; `None` when there is none. A lexical scan, so malformed text is left
/// to the parser to report.
fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'#' => {
                i += memchr::memchr(b'\n', &bytes[i..]).unwrap_or(bytes.len() - i);
                continue;
            }
            b'"' | b'\'' => {
                let triple = bytes[i..].starts_with(&[byte; 3]);
                i += if triple { 3 } else { 1 };
                while let Some(&c) = bytes.get(i) {
                    if byte == b'"' && c == b'\\' {
                        i += 2;
                        continue;
                    }
                    if triple {
                        if bytes[i..].starts_with(&[byte; 3]) {
                            i += 3;
                            break;
                        }
                    } else if c == byte || c == b'\n' {
                        i += 1;
                        break;
                    }
                    i += 1;
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_TOML_NESTING {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Deserializes strictly; an error names the key's path, and the kind of value found rather
/// than the value (it may be a secret in the wrong place).
pub(crate) fn deserialize_strict<T: serde::de::DeserializeOwned>(
    value: toml::Value,
) -> Result<T, Vec<ConfigIssue>> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let key = error.path().to_string();
        vec![ConfigIssue {
            key: if key == "." {
                "(top level)".into()
            } else {
                key
            },
            problem: without_value(&error.into_inner().to_string()),
        }]
    })
}

/// serde's `invalid type: string "…", expected u64` without the value: `invalid type: string
/// (value not shown), expected u64`.
fn without_value(problem: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = problem.strip_prefix(prefix)
            && let Some((found, expected)) = rest.split_once(", expected ")
        {
            let kind = found
                .split([' ', '`', '"'])
                .next()
                .filter(|kind| !kind.is_empty())
                .unwrap_or("value");
            return format!("{prefix}{kind} (value not shown), expected {expected}");
        }
    }
    problem.to_owned()
}

/// Replaces `${NAME}` / `${NAME:-default}` in every string of `value`; `path` is the key path
/// of `value`, for error messages.
fn interpolate(
    value: &mut toml::Value,
    path: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
    issues: &mut Vec<ConfigIssue>,
) {
    match value {
        toml::Value::String(text) => match expand(text, env) {
            Ok(expanded) => *text = expanded,
            Err(problem) => issues.push(ConfigIssue {
                key: path.clone(),
                problem,
            }),
        },
        toml::Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                interpolate(item, path, env, issues);
                path.truncate(len);
            }
        }
        toml::Value::Table(table) => {
            for (key, item) in table.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                interpolate(item, path, env, issues);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Expands `${NAME}`, `${NAME:-default}` and `${file:PATH}`; `$$` is a literal `$`.
/// The contents of a secret file for `${file:PATH}`, without one trailing newline (as secrets
/// mounted by Docker or Kubernetes, or written with `echo`, usually end). The error names the
/// path, never the contents.
fn read_secret_file(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("${file:} needs a path, e.g. ${file:/run/secrets/pg_password}".to_owned());
    }
    let mut text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the secret file {path}: {e}"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(body) = after.strip_prefix('{') {
            // The text is not quoted back: it may hold a secret.
            let end = body.find('}').ok_or_else(|| {
                "unterminated ${: expected ${NAME}, ${NAME:-default} or ${file:/path}".to_owned()
            })?;
            if let Some(path) = body[..end].strip_prefix("file:") {
                out.push_str(&read_secret_file(path)?);
                rest = &body[end + 1..];
                continue;
            }
            let (name, default) = match body[..end].split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (&body[..end], None),
            };
            match (env(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (use ${{{name}:-default}} for a default)"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let env = |name: &str| (name == "A").then(|| "x".to_owned());
        assert_eq!(expand("a${A}b", &env).unwrap(), "axb");
        assert_eq!(expand("${B:-d}", &env).unwrap(), "d");
        assert_eq!(expand("$$1 $x", &env).unwrap(), "$1 $x");
        assert!(expand("${A", &env).is_err());
        assert!(expand("${B}", &env).is_err());
    }
}
