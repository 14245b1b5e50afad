//! The module structure, checked from the source: `cargo test -p sluice --test structure`.
//!
//! - The data path never imports the admin server: no `crate::admin` in `source/`, `sink/`,
//!   `runtime/`, `kafka.rs`, `event/` or `dead_letter.rs` (they write status and metrics to
//!   `runtime`, which the admin server only reads).
//! - The top-level modules form no import cycle. An edge that closes one fails the test with
//!   the cycle. ([`KNOWN_CYCLE_EDGES`] can hold edges to tolerate while a cycle is being
//!   removed; an edge listed there that no longer closes a cycle fails the test too, so the
//!   list only shrinks. It is empty.)
//!
//! A reference is any `crate::<module>` path outside a comment, in `use` lines and in code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules of the data path: they must not reach the admin server.
const DATA_PATH: &[&str] = &["source", "sink", "runtime", "kafka", "event", "dead_letter"];

/// Edges (from, to) that close an import cycle today; each is to go. (None: keep it so.)
const KNOWN_CYCLE_EDGES: &[(&str, &str)] = &[];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`source/postgres/stream.rs` → `source`).
fn top_module(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()
        .expect("a component")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.strip_suffix(".rs").unwrap_or(&first).to_owned()
}

/// `crate::<module>` references per top-level module: module → (referenced module → where).
fn references() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in files {
        let from = top_module(&src, &file);
        if from == "main" || from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(at) = rest.find("crate::") {
                let after = &rest[at + "crate::".len()..];
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `$crate::` in macros and `sluice_crate::`-like names are not ours.
                let preceded = rest[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
                if !preceded && !name.is_empty() && name != from {
                    graph
                        .entry(from.clone())
                        .or_default()
                        .entry(name)
                        .or_default()
                        .push(format!(
                            "{}:{}",
                            file.strip_prefix(&src).unwrap().display(),
                            number + 1
                        ));
                }
                rest = after;
            }
        }
    }
    graph
}

/// Whether `to` reaches `from` in `graph` (so that the edge from → to closes a cycle); the
/// path if it does.
fn path_back(
    graph: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    to: &str,
    from: &str,
) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![to.to_owned()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
        if last == from {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flat_map(|m| m.keys()) {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

#[test]
fn the_data_path_does_not_import_the_admin_server() {
    let graph = references();
    let mut found = Vec::new();
    for module in DATA_PATH {
        if let Some(places) = graph.get(*module).and_then(|m| m.get("admin")) {
            found.push(format!("{module} -> admin at {places:?}"));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    assert!(
        graph.contains_key("source") && graph.contains_key("sink"),
        "the scan found the modules"
    );
}

#[test]
fn top_level_modules_form_no_new_import_cycle() {
    let graph = references();
    // Without the known edges, the graph must have no cycle at all.
    let mut reduced = graph.clone();
    for (from, to) in KNOWN_CYCLE_EDGES {
        if let Some(targets) = reduced.get_mut(*from) {
            targets.remove(*to);
        }
    }
    let mut cycles = Vec::new();
    for (from, targets) in &reduced {
        for (to, places) in targets {
            if let Some(back) = path_back(&reduced, to, from) {
                cycles.push(format!(
                    "{from} -> {to} (at {}) closes the cycle {from} -> {}",
                    places[0],
                    back.join(" -> ")
                ));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
    // Each known edge must still exist and close a cycle; otherwise the list is stale.
    let gone: Vec<_> = KNOWN_CYCLE_EDGES
        .iter()
        .filter(|(from, to)| {
            !graph.get(*from).is_some_and(|t| t.contains_key(*to))
                || path_back(&graph, to, from).is_none()
        })
        .collect();
    assert!(
        gone.is_empty(),
        "these known edges no longer close a cycle: remove them from KNOWN_CYCLE_EDGES: {gone:?}"
    );
}
