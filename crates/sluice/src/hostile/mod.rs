//! Hostile input, tried systematically: property tests for every decoder that reads bytes from
//! outside the process.
//!
//! Each property feeds a decoder input a hostile peer could send (random bytes, valid messages
//! mutated, forged lengths and counts, deep nesting) and holds it to: no panic, no stack
//! overflow, no allocation sized by a length field rather than by the bytes that came; and,
//! where sluice has an encoder (or the format a writer produces is known), that what is
//! encoded decodes back to itself.
//!
//! | decoder | module |
//! | --- | --- |
//! | pgoutput messages | [`pgoutput`] (and `source::postgres::pgoutput`'s own tests) |
//! | the replication protocol's framing | `source::postgres::replication::hostile` |
//! | MySQL: row images, GTIDs, DDL statements, ROTATE names | [`mysql`] |
//! | sink decoders: Debezium JSON, JSON with schemas, plain rows; JSON checks | [`sink`] |
//! | path templates | [`template`] |
//! | incremental snapshot signal rows | [`signal`] |
//! | admin API bodies | [`admin`] |
//! | pipeline files and `${…}` interpolation | [`config`] |
//!
//! The normal suite runs each property with proptest's default case count (256, a few seconds
//! in all); `scripts/fuzz` runs the same properties with `PROPTEST_CASES=1000000` (see
//! docs/development.md). A crash found is fixed and kept as a named unit test with its
//! minimal input, beside the property that found it.

mod admin;
mod config;
mod mysql;
mod pgoutput;
mod signal;
mod sink;
mod template;

use proptest::test_runner::Config;

/// The configuration of every hostile-input property: the case count from `PROPTEST_CASES`
/// (256 by default), no regression files (a failure is kept as a named unit test instead),
/// and a bounded shrink so a long run that finds something reports it in reasonable time.
pub(crate) fn config() -> Config {
    Config {
        failure_persistence: None,
        max_shrink_iters: 10_000,
        ..Config::default()
    }
}

/// `depth` nested JSON arrays around `inner`: `[[[…inner…]]]`.
pub(crate) fn nested_arrays(depth: usize, inner: &str) -> String {
    let mut text = String::with_capacity(depth * 2 + inner.len());
    text.extend(std::iter::repeat_n('[', depth));
    text.push_str(inner);
    text.extend(std::iter::repeat_n(']', depth));
    text
}

/// `depth` nested JSON objects `{"a":{"a":…}}` around `inner`.
pub(crate) fn nested_objects(depth: usize, inner: &str) -> String {
    let mut text = String::with_capacity(depth * 6 + inner.len());
    for _ in 0..depth {
        text.push_str("{\"a\":");
    }
    text.push_str(inner);
    text.extend(std::iter::repeat_n('}', depth));
    text
}

/// Runs `f` on a thread with a small stack (256 KiB, an eighth of a test thread's): a decoder
/// that recurses once per nesting level overflows it long before 100,000 levels, so a deep
/// input that passes here does not recurse with its depth.
pub(crate) fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("spawn a thread")
        .join()
        .expect("the decoder did not panic")
}

/// Text made of JSON's punctuation, keywords and a few escapes: random bytes rarely get past a
/// JSON parser's first byte, this gets into its nesting and string states.
pub(crate) fn json_like() -> impl proptest::strategy::Strategy<Value = String> {
    proptest::string::string_regex(
        r#"([\[\]{}:,"\\ ]|true|false|null|-?[0-9]{1,3}(\.[0-9]+)?(e[+-]?[0-9]+)?|"[a-z_\\\\u0-9]{0,6}"|\\u[0-9a-fA-F]{0,4}){0,40}"#,
    )
    .expect("a valid regex")
}
