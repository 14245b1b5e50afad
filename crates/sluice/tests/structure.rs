//! The module structure, checked from the source: `cargo test -p sluice --test structure`.
//!
//! - The data path never imports the admin server: no `crate::admin` in `source/`, `sink/`,
//!   `runtime/`, `kafka/`, `event/`, `delivery/`, `transform/` or their files (they write
//!   status and metrics to `runtime`, which the admin server only reads).
//! - The data path never imports a command's code either (`compaction`, `verify`, `import`,
//!   `doctor`, `check`, `perf`, `app`, `cli`): what a pipeline and a command share lives on
//!   the data path's side (as `kafka::keys` does for the compaction scan and the incremental
//!   snapshot's republication), so a command's errors (`anyhow`) and its dependencies never
//!   reach a running pipeline.
//! - The top-level modules form no import cycle. An edge that closes one fails the test with
//!   the cycle. ([`KNOWN_CYCLE_EDGES`] can hold edges to tolerate while a cycle is being
//!   removed; an edge listed there that no longer closes a cycle fails the test too, so the
//!   list only shrinks. It is empty.)
//!
//! - No two files import each other, directly or around a circle: each file can be read
//!   with only the files below it. A cycle fails the test with the files, one shortest
//!   circle through them with the names that tie each step (`a.rs -> b.rs (X) -> a.rs (Y)`),
//!   and every edge inside the knot. ([`KNOWN_FILE_CYCLE_EDGES`] holds the edges tolerated
//!   while a knot is being taken apart; an edge there that no longer closes a cycle fails the
//!   test, so the list only shrinks. It is empty.)
//!
//! For the top-level modules a reference is any `crate::<module>` path outside a comment, in
//! `use` lines and in code. For files, see [`file_graph`]: `use` trees (`crate::`, `super::`,
//! `self::`, groups, renames, globs) and paths in code, each resolved to the file that
//! defines the name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules of the data path: they must not reach the admin server or a command.
const DATA_PATH: &[&str] = &[
    "source",
    "sink",
    "runtime",
    "kafka",
    "kafka_state",
    "event",
    "delivery",
    "transform",
    "record",
    "dead_letter",
];

/// The command-line commands' modules, which the data path must not import.
const COMMANDS: &[&str] = &[
    "compaction",
    "verify",
    "import",
    "doctor",
    "check",
    "perf",
    "app",
    "cli",
];

/// Edges (from, to) that close an import cycle today; each is to go. (None: keep it so.)
const KNOWN_CYCLE_EDGES: &[(&str, &str)] = &[];

/// File edges (from, to) that close an import cycle today; each is to go. (None: keep it so.)
const KNOWN_FILE_CYCLE_EDGES: &[(&str, &str)] = &[];

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
fn the_data_path_does_not_import_a_command() {
    let graph = references();
    let mut found = Vec::new();
    for module in DATA_PATH {
        for command in COMMANDS {
            if let Some(places) = graph.get(*module).and_then(|m| m.get(*command)) {
                found.push(format!("{module} -> {command} at {places:?}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the data path imports a command's code (move what both need to the data path's side):\n{found:#?}"
    );
    assert!(
        COMMANDS.iter().all(|c| graph.contains_key(*c)),
        "the scan found the commands"
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

// ---- File-level cycles ----------------------------------------------------------------------
//
// The graph between files, read from the source text. This is a hand parser of paths, not
// `syn`: syn is in the lock file only as a proc-macro dependency of other crates, without the
// `full` and `visit` features a walk of every path would need, and a dev-dependency on it
// would build it a second time with them for this one test. What it has to see is small: the
// tokens of the source with comments and literals taken out, `use` trees, paths in code that
// start at `crate`, `super`, `self` or a module name in scope, inline `mod x { … }` blocks
// (they change what `super` means) and `#[path]` modules.

/// One token: an identifier, `::`, or one punctuation character; with its line.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of a Rust source, without comments, string, char and number literals.
fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let ident_start = |c: char| c.is_alphabetic() || c == '_';
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied().unwrap_or('\0');
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            _ if c.is_whitespace() => i += 1,
            '/' if next == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == '*' => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(chars[i] == '\n');
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(&chars, i + 1, 0, &mut line),
            // r"…", r#"…"#, br"…", b"…", and raw identifiers r#name.
            'r' | 'b' if !out.is_empty() || i == 0 || !ident_char(chars[i - 1]) => {
                let mut j = i + usize::from(c == 'b' && next == 'r') + 1;
                let raw = c == 'r' || next == 'r';
                let mut hashes = 0;
                while raw && chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) == Some(&'"') && (raw || c == 'b') {
                    i = skip_string(&chars, j + 1, hashes, &mut line);
                } else if c == 'r' && hashes == 1 && chars.get(j).is_some_and(|&c| ident_start(c)) {
                    let end = (j..chars.len())
                        .find(|&k| !ident_char(chars[k]))
                        .unwrap_or(chars.len());
                    out.push((Tok::Ident(chars[j..end].iter().collect()), line));
                    i = end;
                } else if c == 'b' && next == '\'' {
                    i = skip_char(&chars, i + 1);
                } else {
                    let end = (i..chars.len())
                        .find(|&k| !ident_char(chars[k]))
                        .unwrap_or(chars.len());
                    out.push((Tok::Ident(chars[i..end].iter().collect()), line));
                    i = end;
                }
            }
            '\'' => i = skip_char(&chars, i),
            ':' if next == ':' => {
                out.push((Tok::PathSep, line));
                i += 2;
            }
            _ if c.is_ascii_digit() => {
                while i < chars.len()
                    && (ident_char(chars[i])
                        || chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
                {
                    i += 1;
                }
            }
            _ if ident_start(c) => {
                let end = (i..chars.len())
                    .find(|&k| !ident_char(chars[k]))
                    .unwrap_or(chars.len());
                out.push((Tok::Ident(chars[i..end].iter().collect()), line));
                i = end;
            }
            _ => {
                out.push((Tok::Punct(c), line));
                i += 1;
            }
        }
    }
    out
}

/// Past a string whose opening quote is before `i`, closed by `"` and `hashes` `#`s.
fn skip_string(chars: &[char], mut i: usize, hashes: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' if hashes == 0 => i += 2,
            '"' if (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#')) => {
                return i + 1 + hashes;
            }
            c => {
                *line += usize::from(c == '\n');
                i += 1;
            }
        }
    }
    i
}

/// Past a char literal at `i` (`'a'`, `'\n'`, `'\u{1F600}'`), or past the `'` of a lifetime.
fn skip_char(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        (i + 2..chars.len())
            .find(|&k| chars[k] == '\'')
            .map_or(chars.len(), |k| k + 1)
    } else if chars.get(i + 2) == Some(&'\'') {
        i + 3
    } else {
        i + 1
    }
}

/// A module path, `crate` being the empty path.
type ModPath = Vec<String>;

/// A path as written in a file: a `use` leaf or a path in code, with the module it is
/// written in (a file's module, or an inline module in it).
#[derive(Debug, Clone)]
struct Written {
    segments: Vec<String>,
    scope: ModPath,
    /// For `use` leaves: the name it binds (`as` name or last segment), none for a glob.
    binds: Option<String>,
    glob: bool,
    /// `pub use` / `pub(crate) use`: the file passes the name on; it does not use it.
    reexport: bool,
    is_use: bool,
}

/// What one file says.
struct FileText {
    module: ModPath,
    /// `mod x;`: child modules, whose names are path roots in the file.
    children: Vec<String>,
    written: Vec<Written>,
}

/// The module a file is, from its place under src/ (`sink/mod.rs` → `sink`).
fn module_of(relative: &Path) -> ModPath {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap_or(&last).to_owned();
    if stem != "mod" && stem != "lib" {
        parts.push(stem);
    }
    parts
}

/// `crate`, `self` and `super` at the head of `segments`, taken against `scope`; `None` when
/// the path starts elsewhere (a module name in scope, another crate, a type).
fn absolute(scope: &[String], segments: &[String]) -> Option<ModPath> {
    let mut base: ModPath = scope.to_vec();
    let mut rest = segments;
    match segments.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &segments[1..];
        }
        Some("self") => rest = &segments[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// One leaf of a `use` tree: its segments, the `as` name, whether it is a glob.
type UseLeaf = (Vec<String>, Option<String>, bool);

/// The leaves of the `use` tree at `tokens[at]`; the index after it.
fn use_tree(
    tokens: &[(Tok, usize)],
    mut at: usize,
    prefix: &[String],
    out: &mut Vec<UseLeaf>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(at).map(|t| &t.0) {
            Some(Tok::Ident(word)) if word == "as" => {
                let alias = match tokens.get(at + 1).map(|t| &t.0) {
                    Some(Tok::Ident(alias)) if alias != "_" => Some(alias.clone()),
                    _ => None,
                };
                out.push((path, alias, false));
                return at + 2;
            }
            Some(Tok::Ident(name)) => {
                path.push(name.clone());
                at += 1;
            }
            Some(Tok::PathSep) => at += 1,
            Some(Tok::Punct('*')) => {
                out.push((path, None, true));
                return at + 1;
            }
            Some(Tok::Punct('{')) => {
                at += 1;
                while !matches!(tokens.get(at).map(|t| &t.0), Some(Tok::Punct('}')) | None) {
                    at = use_tree(tokens, at, &path, out);
                    if tokens.get(at).is_some_and(|t| t.0 == Tok::Punct(',')) {
                        at += 1;
                    }
                }
                return at + 1;
            }
            _ => {
                if path.len() > prefix.len() {
                    out.push((path, None, false));
                }
                return at;
            }
        }
    }
}

/// The paths one file writes.
fn read_file(module: ModPath, text: &str) -> FileText {
    let tokens = tokens(text);
    let ident = |k: usize| match tokens.get(k).map(|t| &t.0) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    let punct = |k: usize, c: char| tokens.get(k).is_some_and(|t| t.0 == Tok::Punct(c));
    let sep = |k: usize| tokens.get(k).is_some_and(|t| t.0 == Tok::PathSep);
    let mut file = FileText {
        module,
        children: Vec::new(),
        written: Vec::new(),
    };
    // Inline `mod x { … }` blocks open: their name and the brace depth inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let (mut depth, mut k) = (0, 0);
    while k < tokens.len() {
        let scope: ModPath = file
            .module
            .iter()
            .chain(inline.iter().map(|(n, _)| n))
            .cloned()
            .collect();
        match &tokens[k].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Tok::Ident(word) if word == "mod" && punct(k + 2, '{') => {
                inline.push((ident(k + 1).unwrap_or("_").to_owned(), depth + 1));
            }
            Tok::Ident(word) if word == "mod" && punct(k + 2, ';') && inline.is_empty() => {
                file.children.extend(ident(k + 1).map(str::to_owned));
            }
            Tok::Ident(word) if word == "use" && !sep(k.wrapping_sub(1)) => {
                let reexport = ident(k.wrapping_sub(1)) == Some("pub")
                    || punct(k.wrapping_sub(1), ')') && ident(k.wrapping_sub(4)) == Some("pub");
                let start = if sep(k + 1) { k + 2 } else { k + 1 };
                let mut leaves = Vec::new();
                k = use_tree(&tokens, start, &[], &mut leaves);
                for (segments, alias, glob) in leaves {
                    let binds = if glob {
                        None
                    } else {
                        alias.or_else(|| segments.last().cloned())
                    };
                    file.written.push(Written {
                        segments,
                        scope: scope.clone(),
                        binds,
                        glob,
                        reexport,
                        is_use: true,
                    });
                }
                continue;
            }
            Tok::Ident(first)
                if sep(k + 1) && !punct(k.wrapping_sub(1), '$') && !sep(k.wrapping_sub(1)) =>
            {
                // A path in code (`crate::a::b`, `super::x::f`, `stream::run`), up to its last
                // identifier.
                let mut segments = vec![first.clone()];
                let mut j = k + 1;
                while sep(j) {
                    match ident(j + 1) {
                        Some(s) => segments.push(s.to_owned()),
                        None => break,
                    }
                    j += 2;
                }
                file.written.push(Written {
                    segments,
                    scope: scope.clone(),
                    binds: None,
                    glob: false,
                    reexport: false,
                    is_use: false,
                });
                k = j;
                continue;
            }
            _ => {}
        }
        k += 1;
    }
    file
}

/// The file graph: file → (file it uses → the names it takes from there).
type FileGraph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Every file of src/ (but main.rs, the binary's own crate) and what it takes from which file.
///
/// A path is resolved to the file of its longest prefix that is a module file; the segment
/// after that prefix is the name that ties the edge (`mod` when the path is the module itself,
/// `*` for a glob). A name a file re-exports (`pub use x::Y`, `pub use crate::m as n`) is
/// followed to the file that defines it: a re-export passes a name on, and the file that
/// re-exports it is no edge of its own; nor is `mod x;`.
fn file_graph() -> FileGraph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut texts: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let relative = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            (
                relative,
                std::fs::read_to_string(p).expect("read a source file"),
            )
        })
        .filter(|(relative, _)| relative != "main.rs")
        .collect();
    texts.sort();
    // `#[path = "x_hostile.rs"] mod hostile;` makes `x_hostile.rs` the module `…::x::hostile`.
    let mut declared: BTreeMap<String, ModPath> = BTreeMap::new();
    for (relative, text) in &texts {
        let tokens = tokens(text);
        for k in 0..tokens.len() {
            if tokens[k].0 == Tok::Ident("path".into())
                && k >= 2
                && tokens[k - 2].0 == Tok::Punct('[')
            {
                let line = text.lines().nth(tokens[k].1 - 1).unwrap_or("");
                let name = line.split('"').nth(1).unwrap_or("");
                let module_line = text
                    .lines()
                    .skip(tokens[k].1)
                    .find(|l| l.trim_start().starts_with("mod "));
                if let Some(child) = module_line.and_then(|l| l.trim().strip_prefix("mod ")) {
                    let dir = Path::new(relative).parent().unwrap_or(Path::new(""));
                    let mut module = module_of(Path::new(relative));
                    module.push(child.trim_end_matches(';').trim().to_owned());
                    declared.insert(dir.join(name).to_string_lossy().into_owned(), module);
                }
            }
        }
    }
    let files: Vec<(String, FileText)> = texts
        .iter()
        .map(|(relative, text)| {
            let module = declared
                .get(relative)
                .cloned()
                .unwrap_or_else(|| module_of(Path::new(relative)));
            (relative.clone(), read_file(module, text))
        })
        .collect();
    let by_module: BTreeMap<ModPath, String> = files
        .iter()
        .map(|(relative, f)| (f.module.clone(), relative.clone()))
        .collect();
    // The module names each file can start a path with, and where they point.
    let roots: BTreeMap<&str, BTreeMap<String, ModPath>> = files
        .iter()
        .map(|(relative, f)| {
            let mut names: BTreeMap<String, ModPath> = f
                .children
                .iter()
                .map(|c| (c.clone(), f.module.iter().chain([c]).cloned().collect()))
                .collect();
            for w in f.written.iter().filter(|w| w.is_use) {
                if let (Some(binds), Some(path)) = (&w.binds, absolute(&w.scope, &w.segments))
                    && by_module.contains_key(&path)
                {
                    names.insert(binds.clone(), path);
                }
            }
            (relative.as_str(), names)
        })
        .collect();
    let resolve_root = |relative: &str, w: &Written| -> Option<ModPath> {
        absolute(&w.scope, &w.segments).or_else(|| {
            let (first, rest) = w.segments.split_first()?;
            let base = roots[relative].get(first)?;
            Some(base.iter().chain(rest).cloned().collect())
        })
    };
    // Re-exports: (module, name) → the path the name stands for.
    let mut reexports: BTreeMap<(ModPath, String), ModPath> = BTreeMap::new();
    for (relative, f) in &files {
        for w in f.written.iter().filter(|w| w.reexport) {
            if let (Some(binds), Some(path)) = (&w.binds, resolve_root(relative, w)) {
                reexports.insert((f.module.clone(), binds.clone()), path);
            }
        }
    }
    // The file a path lands in and the name it takes there.
    let land = |mut path: ModPath, glob: bool| -> Option<(String, String)> {
        for _ in 0..8 {
            let cut = (0..=path.len())
                .rev()
                .find(|&n| by_module.contains_key(&path[..n]))?;
            let module = path[..cut].to_vec();
            match path.get(cut) {
                Some(name) if reexports.contains_key(&(module.clone(), name.clone())) => {
                    let target = &reexports[&(module, name.clone())];
                    path = target.iter().chain(&path[cut + 1..]).cloned().collect();
                }
                Some(name) => return Some((by_module[&module].clone(), name.clone())),
                None => {
                    let name = if glob { "*" } else { "mod" };
                    return Some((by_module[&module].clone(), name.to_owned()));
                }
            }
        }
        None
    };
    let mut graph = FileGraph::new();
    for (relative, f) in &files {
        graph.entry(relative.clone()).or_default();
        for w in f.written.iter().filter(|w| !w.reexport) {
            let Some(path) = resolve_root(relative, w) else {
                continue;
            };
            let Some((to, name)) = land(path, w.glob) else {
                continue;
            };
            if &to != relative {
                graph
                    .entry(relative.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(name);
            }
        }
    }
    graph
}

/// The strongly connected parts of more than one file (Tarjan's algorithm), each sorted.
fn knots(graph: &FileGraph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a FileGraph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, node: &'a str) {
        let n = w.index.len();
        w.index.insert(node, n);
        w.low.insert(node, n);
        w.stack.push(node);
        w.on_stack.insert(node);
        for next in w.graph.get(node).into_iter().flat_map(|m| m.keys()) {
            let next = next.as_str();
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[node].min(w.low[next]);
                w.low.insert(node, low);
            } else if w.on_stack.contains(next) {
                let low = w.low[node].min(w.index[next]);
                w.low.insert(node, low);
            }
        }
        if w.low[node] == w.index[node] {
            let mut part = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack.remove(top);
                part.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            if part.len() > 1 {
                part.sort();
                w.found.push(part);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found.sort();
    walk.found
}

/// The shortest cycle through `start` inside `part`, as the files in order back to `start`.
fn shortest_cycle(graph: &FileGraph, part: &[String], start: &str) -> Vec<String> {
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in graph[node].keys().filter(|n| part.contains(n)) {
            if next == start {
                let mut back = vec![start.to_owned()];
                let mut at = node;
                while at != start {
                    back.push(at.to_owned());
                    at = previous[at];
                }
                back.push(start.to_owned());
                back.reverse();
                return back;
            }
            if !previous.contains_key(next.as_str()) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    Vec::new()
}

/// `a.rs -> b.rs (X, Y) -> a.rs (Z)`: a cycle with the names that tie each edge.
fn describe_cycle(graph: &FileGraph, cycle: &[String]) -> String {
    let mut text = cycle[0].clone();
    for pair in cycle.windows(2) {
        let names: Vec<&str> = graph[&pair[0]][&pair[1]]
            .iter()
            .map(String::as_str)
            .collect();
        text.push_str(&format!(" -> {} ({})", pair[1], names.join(", ")));
    }
    text
}

#[test]
fn files_form_no_import_cycle() {
    let full = file_graph();
    assert!(
        full.contains_key("source/postgres/stream.rs")
            && full["source/postgres/stream.rs"].contains_key("source/postgres/slot_state.rs"),
        "the scan sees that the PostgreSQL stream uses the slot state"
    );
    let mut graph = full.clone();
    for (from, to) in KNOWN_FILE_CYCLE_EDGES {
        if let Some(targets) = graph.get_mut(*from) {
            targets.remove(*to);
        }
    }
    let mut report = Vec::new();
    for part in knots(&graph) {
        let mut lines = vec![format!(
            "{} files tied in a cycle: {}",
            part.len(),
            part.join(", ")
        )];
        let mut covered = BTreeSet::new();
        for start in &part {
            if covered.contains(start) {
                continue;
            }
            let cycle = shortest_cycle(&graph, &part, start);
            covered.extend(cycle.iter().cloned());
            lines.push(format!("  {}", describe_cycle(&graph, &cycle)));
        }
        lines.push("  every edge inside it:".to_owned());
        for from in &part {
            for (to, names) in graph[from].iter().filter(|(to, _)| part.contains(to)) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                lines.push(format!("    {from} -> {to} ({})", names.join(", ")));
            }
        }
        report.push(lines.join("\n"));
    }
    assert!(
        report.is_empty(),
        "import cycles between files:\n{}",
        report.join("\n")
    );
    // Each known edge must still exist and close a cycle; otherwise the list is stale.
    let knots_today = knots(&full);
    let stale: Vec<_> = KNOWN_FILE_CYCLE_EDGES
        .iter()
        .filter(|(from, to)| {
            !full.get(*from).is_some_and(|t| t.contains_key(*to))
                || !knots_today
                    .iter()
                    .any(|part| part.iter().any(|f| f == from) && part.iter().any(|f| f == to))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "these known edges no longer close a cycle: remove them from KNOWN_FILE_CYCLE_EDGES: {stale:?}"
    );
}
