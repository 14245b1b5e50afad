//! Pipeline files and `${…}` interpolation: any text is a pipeline or a configuration error
//! naming keys (never a panic, never a stack overflow on deep nesting); `$$` and `${NAME}`
//! expand to exactly what they stand for, once.

use proptest::prelude::*;

use super::on_small_stack;
use crate::config::load::parse_interpolated;
use crate::pipeline_file::PipelineFile;

const EXAMPLES: [&str; 6] = [
    include_str!("../../../../examples/postgres-to-kafka.toml"),
    include_str!("../../../../examples/mysql-to-kafka.toml"),
    include_str!("../../../../examples/kafka-to-files.toml"),
    include_str!("../../../../examples/kafka-to-postgres.toml"),
    include_str!("../../../../examples/kafka-to-s3.toml"),
    include_str!("../../../../examples/kafka-to-iceberg.toml"),
];

/// Variables the tests' environment has.
fn env(name: &str) -> Option<String> {
    match name {
        "PG_PASSWORD" => Some("p$w{d}".to_owned()),
        "EMPTY" => Some(String::new()),
        "DOLLAR" => Some("${PG_PASSWORD}".to_owned()),
        _ => None,
    }
}

/// Nothing here may read a file: `${file:…}` has its own tests (config.rs).
fn without_files(text: String) -> String {
    text.replace("file:", "fi_le:")
}

/// An example pipeline with a few of its bytes changed, removed or repeated.
fn mutated_example() -> impl Strategy<Value = String> {
    (
        prop::sample::select(EXAMPLES.to_vec()),
        proptest::collection::vec((any::<prop::sample::Index>(), 0..4u8, any::<char>()), 1..6),
    )
        .prop_map(|(text, edits)| {
            let mut chars: Vec<char> = text.chars().collect();
            for (at, kind, c) in edits {
                if chars.is_empty() {
                    break;
                }
                let i = at.index(chars.len());
                match kind {
                    0 => chars[i] = c,
                    1 => {
                        chars.remove(i);
                    }
                    2 => chars.insert(i, c),
                    _ => chars.truncate(i),
                }
            }
            without_files(chars.into_iter().collect())
        })
}

/// TOML-ish text with interpolation pieces.
fn toml_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            "[source.postgres]",
            "[source.mysql]",
            "[source.kafka]",
            "[sink.files]",
            "[kafka]",
            "[admin]",
            "[[x]]",
            "name = ",
            "url = ",
            "\"",
            "'",
            "'''",
            "\"\"\"",
            "=",
            "\n",
            "[",
            "]",
            "{",
            "}",
            ",",
            "${",
            "${PG_PASSWORD}",
            "${MISSING}",
            "${MISSING:-d}",
            "$$",
            "${EMPTY:-}",
            "${DOLLAR}",
            "$",
            "}",
            "\\u0000",
            "\\",
            "1",
            "-1e400",
            "true",
            "#",
            "1979-05-27T07:32:00Z",
            "nan",
            "inf",
        ])
        .prop_map(str::to_owned),
        "[a-z_.]{1,8}",
        any::<char>().prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..32).prop_map(|p| without_files(p.concat()))
}

/// `text` as a TOML basic string's content.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

proptest! {
    #![proptest_config(super::config())]

    /// Any pipeline text: a pipeline or an error.
    #[test]
    fn pipeline_files_parse_or_fail(
        text in prop_oneof![mutated_example(), toml_like(), any::<String>().prop_map(without_files)],
    ) {
        let _ = PipelineFile::from_toml(&text, "fuzz.toml", &env);
    }

    /// `$` written as `$$` is a `$`: any string, escaped, interpolates to itself.
    #[test]
    fn escaped_strings_interpolate_to_themselves(text in any::<String>()) {
        let escaped = text.replace('$', "$$");
        let file = format!("key = {}\n", toml_string(&escaped));
        let value = parse_interpolated(&file, "fuzz.toml", &|_| None).expect("valid");
        prop_assert_eq!(value.get("key").and_then(toml::Value::as_str), Some(text.as_str()));
    }

    /// `${NAME}` is the variable's value, once: a value holding `${…}` or `$$` is not expanded
    /// again.
    #[test]
    fn variables_expand_once(value in any::<String>(), before in "[a-z ]{0,4}", after in "[a-z ]{0,4}") {
        prop_assume!(!value.is_empty());
        let file = format!("key = {}\n", toml_string(&format!("{before}${{V}}{after}")));
        let lookup = |name: &str| (name == "V").then(|| value.clone());
        let parsed = parse_interpolated(&file, "fuzz.toml", &lookup).expect("valid");
        let expected = format!("{before}{value}{after}");
        prop_assert_eq!(parsed.get("key").and_then(toml::Value::as_str), Some(expected.as_str()));
    }
}

/// Found by `deeply_nested_pipeline_files_are_errors`: the TOML parser recursed once per level
/// and 100,000 levels of `[` overflowed the stack (a crash of `sluice run` and `check`), its
/// own recursion limit notwithstanding. Now more than 64 levels are a syntax error naming the
/// place, found before parsing.
#[test]
fn toml_nesting_is_capped_before_parsing() {
    use crate::config::ConfigError;
    use crate::config::load::parse_toml;
    let nested = |depth: usize| format!("x = {}{}\n", "[".repeat(depth), "]".repeat(depth));
    let at_the_cap = parse_toml(&nested(64), "f.toml");
    assert!(at_the_cap.is_ok(), "{at_the_cap:?}");
    match parse_toml(&format!("a = 1\n{}", nested(65)), "f.toml") {
        Err(ConfigError::Syntax {
            location, message, ..
        }) => {
            assert_eq!(location, "line 2, column 69");
            assert!(message.contains("nested more than 64"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Brackets in strings and comments are not nesting.
    let quoted = format!(
        "a = \"{0}\\\"{0}\"\nb = '{0}'\nc = \"\"\"\n{0}\"\"\"\nd = '''{0}'''\n# {0}\n",
        "[{".repeat(100)
    );
    assert!(
        parse_toml(&quoted, "f.toml").is_ok(),
        "{:?}",
        parse_toml(&quoted, "f.toml")
    );
}

/// Arrays and inline tables nested 100,000 deep in a pipeline file: an error, on a small stack.
#[test]
fn deeply_nested_pipeline_files_are_errors() {
    on_small_stack(|| {
        let arrays = format!(
            "name = \"a\"\nx = {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let tables = format!(
            "name = \"a\"\nx = {}1{}\n",
            "{a = ".repeat(100_000),
            "}".repeat(100_000)
        );
        for text in [arrays, tables] {
            assert!(PipelineFile::from_toml(&text, "deep.toml", &env).is_err());
        }
    });
}
