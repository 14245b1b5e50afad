//! The per-type table of docs/type-mapping.md, generated from the golden files.
//!
//! For every column of the type tables of `scripts/debezium/setup.sql` (`scalars`, `specials`,
//! `arrays`, `others`): its PostgreSQL type, the schema Debezium declares for it (the
//! `schemas-enable` capture), the values Debezium wrote in each captured option combination, and
//! whether sluice writes the same (sluice = Debezium unless a line of
//! `tests/debezium/known-differences.txt` names the column; `events_match_debezium_golden_files`
//! holds sluice to that). The test fails when the table in the doc is not what the golden files
//! and the ratchet file say; `SLUICE_BLESS=1` rewrites it.

use std::collections::BTreeMap;

use super::{J, Rec, golden, golden_root, known_differences, root, statements};

/// The tables of the capture script whose columns are one type each.
const TYPE_TABLES: &[&str] = &["scalars", "specials", "arrays", "others"];

/// The schemaless combinations shown, with the option each sets (defaults first).
const COMBINATIONS: &[(&str, &str)] = &[
    ("defaults", "defaults"),
    ("decimal-string", "`decimal.handling.mode=string`"),
    ("time-connect", "`time.precision.mode=connect`"),
    ("binary-hex", "`binary.handling.mode=hex`"),
];

/// The combinations `events_match_debezium_golden_files` runs sluice on: the sluice column
/// speaks for these only.
const COMPARED: &[&str] = &[
    "defaults",
    "decimal-string",
    "time-connect",
    "binary-hex",
    "truncate",
    "transaction-metadata",
    "schemas-enable",
];

/// Distinct values shown per cell, and the width a value is cut to.
const EXAMPLES: usize = 3;
const WIDTH: usize = 44;

const BEGIN: &str = "<!-- BEGIN generated from the golden files by tests/it/debezium/type_table.rs: \
                     SLUICE_BLESS=1 cargo test -p sluice --test it type_mapping_doc -->";
const END: &str = "<!-- END generated -->";

/// `(table, [(column, type)])` from the `CREATE TABLE` statements of setup.sql.
fn column_types() -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    for statement in statements(&root().join("scripts/debezium/setup.sql")) {
        let Some(rest) = statement.trim().strip_prefix("CREATE TABLE ") else {
            continue;
        };
        let (name, body) = rest.split_once('(').expect("CREATE TABLE name (");
        let name = name.trim();
        if !TYPE_TABLES.contains(&name) {
            continue;
        }
        let body = body.trim_end().trim_end_matches(';').trim_end();
        let body = body.strip_suffix(')').expect("CREATE TABLE … )");
        let columns = body
            .split(",\n")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| {
                let (column, ty) = c.split_once(' ').expect("column type");
                let ty = ty.trim().trim_end_matches(" PRIMARY KEY");
                (column.to_owned(), ty.to_owned())
            })
            .collect();
        out.push((name.to_owned(), columns));
    }
    let found: Vec<&str> = out.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(found, TYPE_TABLES, "type tables of setup.sql");
    out
}

/// The distinct non-null values a column has in `after` across a topic's records, in order
/// (`None`: Debezium leaves the column out of every record).
fn values(records: &[Rec], column: &str) -> Option<Vec<String>> {
    let mut seen = false;
    let mut out: Vec<String> = Vec::new();
    for record in records {
        let Some(J::Obj(after)) = record.value.as_ref().and_then(|v| v.get("after")) else {
            continue;
        };
        let Some((_, v)) = after.iter().find(|(k, _)| k == column) else {
            continue;
        };
        seen = true;
        let shown = v.show();
        if !matches!(v, J::Null) && !out.contains(&shown) {
            out.push(shown);
        }
    }
    seen.then_some(out)
}

/// The `type` and `name` Debezium's `<table>.Value` schema declares for a column.
fn schema_of(records: &[Rec], column: &str) -> Option<String> {
    records.iter().find_map(|record| {
        let J::Arr(fields) = record.value_schema.as_ref()?.get("fields")? else {
            return None;
        };
        let after = fields
            .iter()
            .find(|f| matches!(f.get("field"), Some(J::Str(n)) if n == "after"))?;
        let J::Arr(columns) = after.get("fields")? else {
            return None;
        };
        let field = columns
            .iter()
            .find(|f| matches!(f.get("field"), Some(J::Str(n)) if n == column))?;
        let text = |name: &str| match field.get(name) {
            Some(J::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let mut out = text("type")?;
        if out == "array"
            && let Some(items) = field.get("items")
            && let Some(J::Str(item)) = items.get("type")
        {
            out = format!("array of {item}");
            if let Some(J::Str(name)) = items.get("name") {
                out.push_str(&format!(" {name}"));
            }
        }
        if let Some(name) = text("name") {
            out.push_str(&format!(" {name}"));
        }
        Some(out)
    })
}

/// A table cell of example values.
fn cell(values: &Option<Vec<String>>) -> String {
    match values {
        None => "(left out)".into(),
        Some(v) if v.is_empty() => "`null`".into(),
        Some(v) => {
            let mut shown: Vec<String> = v
                .iter()
                .take(EXAMPLES)
                .map(|value| {
                    let cut: String = value.chars().take(WIDTH).collect();
                    let cut = if cut.len() < value.len() {
                        format!("{cut}…")
                    } else {
                        cut
                    };
                    format!("`{}`", cut.replace('|', "\\|").replace('`', "'"))
                })
                .collect();
            if v.len() > EXAMPLES {
                shown.push(format!("(+{})", v.len() - EXAMPLES));
            }
            shown.join(", ")
        }
    }
}

/// The generated Markdown table.
pub(super) fn generate() -> String {
    let sets: Vec<BTreeMap<String, Vec<Rec>>> =
        COMBINATIONS.iter().map(|(c, _)| golden(c)).collect();
    let with_schemas = golden("schemas-enable");
    let known = known_differences();
    let mut out = String::new();
    out.push_str("| column | PostgreSQL type | Debezium's schema (`schemas.enable=true`) |");
    for (_, option) in COMBINATIONS {
        out.push_str(&format!(" Debezium: {option} |"));
    }
    out.push_str(&format!(
        " sluice (compared with: {}) |\n|---|---|---|",
        COMPARED.join(", ")
    ));
    out.push_str(&"---|".repeat(COMBINATIONS.len()));
    out.push_str("---|\n");
    let mut schemas_found = 0;
    let types = column_types();
    let column_count: usize = types.iter().map(|(_, c)| c.len() - 1).sum();
    for (table, columns) in types {
        let topic = format!("public.{table}");
        for (column, ty) in columns {
            if column == "id" {
                continue;
            }
            let schema = schema_of(&with_schemas[&topic], &column);
            schemas_found += usize::from(schema.is_some());
            let schema = schema.map_or("(left out)".into(), |s| format!("`{s}`"));
            out.push_str(&format!("| `{table}.{column}` | `{ty}` | {schema} |"));
            let base = values(&sets[0][&topic], &column);
            for (i, set) in sets.iter().enumerate() {
                let these = values(&set[&topic], &column);
                if i > 0 && these == base {
                    out.push_str(" = |");
                } else {
                    out.push_str(&format!(" {} |", cell(&these)));
                }
            }
            let differences: Vec<String> = known
                .iter()
                .filter_map(|line| {
                    let mut parts = line.split(' ');
                    let (combination, t, path, kind) =
                        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                    let field = [
                        "value.after.",
                        "value.before.",
                        "value.schema.after.",
                        "value.schema.before.",
                    ]
                    .iter()
                    .find_map(|prefix| path.strip_prefix(prefix))?;
                    (COMPARED.contains(&combination) && t == topic && field == column)
                        .then(|| format!("{combination}: {kind}"))
                })
                .collect();
            if differences.is_empty() {
                out.push_str(" same |\n");
            } else {
                let mut differences = differences;
                differences.dedup();
                out.push_str(&format!(" differs ({}) |\n", differences.join("; ")));
            }
        }
    }
    // Debezium leaves a handful of columns out; a reader that finds no schema is broken.
    assert!(
        schemas_found * 10 >= column_count * 8,
        "schemas found for only {schemas_found} of {column_count} columns in the schemas-enable capture"
    );
    out
}

#[test]
fn type_mapping_doc_is_generated_from_the_golden_files() {
    let path = root().join("docs/type-mapping.md");
    let doc = std::fs::read_to_string(&path).expect("docs/type-mapping.md");
    let (head, rest) = doc
        .split_once(BEGIN)
        .unwrap_or_else(|| panic!("docs/type-mapping.md has no line {BEGIN}"));
    let (current, tail) = rest
        .split_once(END)
        .unwrap_or_else(|| panic!("docs/type-mapping.md has no line {END}"));
    let table = generate();
    let expected = format!("\n{table}");
    if current == expected {
        return;
    }
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, format!("{head}{BEGIN}{expected}{END}{tail}")).unwrap();
        return;
    }
    let first = current
        .lines()
        .zip(expected.lines())
        .find(|(a, b)| a != b)
        .map_or_else(String::new, |(a, b)| {
            format!("\nfirst differing line:\n  doc:       {a}\n  generated: {b}")
        });
    panic!(
        "docs/type-mapping.md's generated table is not what the golden files ({}) and \
         known-differences.txt say; regenerate it with \
         `SLUICE_BLESS=1 cargo test -p sluice --test it type_mapping_doc` and review the diff{first}",
        golden_root().display()
    );
}
