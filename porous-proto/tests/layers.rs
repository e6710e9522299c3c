//! The import rule of `docs/architecture.md`, checked against the source: no module of
//! `porous-proto` imports one above it, and the architecture's tables name every module
//! and file there is.
//!
//! The rule is the table under "Which module may import which": its rows run from the top
//! layer down, each row may import only modules of rows below it, and only those it lists.
//! This test reads that table and every source file (test code left out: `tests.rs` files
//! and `#[cfg(test)]` items), collects the modules each file names through `crate::` (or a
//! `super::` that climbs to the crate root, or a name the crate root re-exports), and fails
//! on any import the table does not allow. So a new import that runs up the layers fails
//! here, and so does a table that no longer matches the tree.
// It reads the repository's files: not on the web (docs/architecture.md, Testing).
#![cfg(not(target_family = "wasm"))]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ARCHITECTURE: &str = include_str!("../../docs/architecture.md");

/// The rows of the markdown table that follows `heading` in the architecture page: each
/// row's cells, header and separator left out.
fn table_after(heading: &str) -> Vec<Vec<String>> {
    let at = ARCHITECTURE.find(heading).unwrap_or_else(|| panic!("docs/architecture.md has no {heading:?}"));
    let rows: Vec<Vec<String>> = ARCHITECTURE[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    assert!(rows.len() > 2, "the table after {heading:?} is empty");
    rows.into_iter().skip(2).collect()
}

/// The names in backticks in `cell`.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// A module's name as the tables write it (`host.rs`, `peer/`) without the suffix.
fn module_name(ticked: &str) -> String {
    ticked.trim_end_matches('/').trim_end_matches(".rs").to_string()
}

/// The top-level modules of the crate and the source files of each (the crate root left
/// out), from the tree.
fn tree(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> =
            fs::read_dir(dir).expect("a source directory").map(|e| e.expect("an entry").path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().to_string();
        if first == "lib.rs" {
            continue;
        }
        modules.entry(module_name(&first)).or_default().push(f);
    }
    modules
}

/// `source` without comments and string literals (so that doc links and messages do not
/// count as imports), and without test code: every item under `#[cfg(test)]`.
fn code_only(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let b = source.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if source[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if source[i..].starts_with("/*") {
            i += source[i..].find("*/").map_or(b.len() - i, |e| e + 2);
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A character literal ('x' or '\n'); a lifetime has no closing quote.
            i += source[i + 1..].find('\'').map_or(1, |e| e + 2);
            out.push_str("' '");
        } else if source[i..].starts_with("#[cfg(test)]") {
            // Skip the item: to its matching closing brace, or to its semicolon.
            i += "#[cfg(test)]".len();
            let mut depth = 0usize;
            while i < b.len() {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    b';' if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            let c = source[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The names the crate root re-exports (`pub use module::{A, B}`), and their modules.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let code = code_only(lib);
    let mut names = BTreeMap::new();
    for stmt in code.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else { continue };
        let Some((module, items)) = rest.split_once("::") else { continue };
        for item in items.trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace()).split(',') {
            let item = item.trim();
            if !item.is_empty() {
                names.insert(item.to_string(), module.trim().to_string());
            }
        }
    }
    names
}

/// The identifiers at the top level of a `{...}` group that starts `text`, or the one
/// identifier that starts it.
fn first_segments(text: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let Some(group) = text.strip_prefix('{') else { return vec![ident(text)] };
    let mut depth = 0usize;
    let mut names = Vec::new();
    let mut start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && (c.is_alphanumeric() || c == '_') => {
                names.push(ident(&group[i..]));
                start = false;
            }
            _ => {}
        }
    }
    names
}

/// The crate's top-level modules (and root re-exports, resolved) that the file at `rel`
/// (relative to `src`) names.
fn imports_of(rel: &Path, code: &str, exports: &BTreeMap<String, String>) -> BTreeSet<String> {
    // The file's module path: `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`.
    let mut path: Vec<String> = rel.iter().map(|c| c.to_string_lossy().to_string()).collect();
    if path.last().is_some_and(|l| l == "mod.rs") {
        path.pop();
    } else if let Some(l) = path.last_mut() {
        *l = l.trim_end_matches(".rs").to_string();
    }
    let mut found = BTreeSet::new();
    let mut add = |name: String| {
        if name.chars().next().is_some_and(char::is_uppercase) {
            if let Some(m) = exports.get(&name) {
                found.insert(m.clone());
            }
        } else if !name.is_empty() && name != "self" {
            found.insert(name);
        }
    };
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        first_segments(&code[at + "crate::".len()..]).into_iter().for_each(&mut add);
    }
    // `super::` chains that climb out of the file's top-level module reach the crate root.
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &code[at..];
        let mut up = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
            up += 1;
        }
        if up >= path.len() {
            first_segments(rest).into_iter().for_each(&mut add);
        }
    }
    found
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = tree(&src);
    let exports = root_exports(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));

    // The table, top row first: each row's modules and what they may import.
    let rows = table_after("### Which module may import which");
    let mut row_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut allowed: Vec<BTreeSet<String>> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let [names, may, ..] = &row[..] else { panic!("row {row:?} is not `| module | may import | why |`") };
        for m in ticked(names) {
            assert!(row_of.insert(module_name(&m), i).is_none(), "{m} has two rows");
        }
        allowed.push(ticked(may).iter().map(|m| module_name(m)).collect());
    }
    let mut problems = Vec::new();
    for m in modules.keys() {
        if !row_of.contains_key(m) {
            problems.push(format!("module {m} has no row in the import table of docs/architecture.md"));
        }
    }
    for m in row_of.keys() {
        if !modules.contains_key(m) {
            problems.push(format!("the import table names {m}, which is not a module of the crate"));
        }
    }
    // The rule itself: a row may allow only modules of rows below it.
    for (i, may) in allowed.iter().enumerate() {
        for m in may {
            match row_of.get(m) {
                Some(&j) if j > i => {}
                Some(_) => {
                    problems.push(format!("row {} of the import table allows {m}, which is not below it", i + 1));
                }
                None => problems.push(format!("row {} of the import table allows {m}, which has no row", i + 1)),
            }
        }
    }
    // The tree: every file's imports are allowed to its module.
    for (m, files) in &modules {
        let Some(&row) = row_of.get(m) else { continue };
        for f in files {
            if f.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let code = code_only(&fs::read_to_string(f).expect("a source file"));
            let rel = f.strip_prefix(&src).expect("under src");
            for used in imports_of(rel, &code, &exports) {
                if used != *m && !allowed[row].contains(&used) {
                    problems.push(format!("{} imports {used}, which the table does not allow {m}", rel.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "the import rule of docs/architecture.md is broken:\n{}", problems.join("\n"));
}

#[test]
fn the_module_table_names_every_module_and_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = tree(&src);
    let rows = table_after("## Modules of porous-proto");
    let mut named: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in &rows {
        let names = row.first().map(|c| ticked(c)).unwrap_or_default();
        let files: BTreeSet<String> =
            row.iter().skip(1).flat_map(|c| ticked(c)).filter(|t| t.ends_with(".rs") || t.ends_with('/')).collect();
        for n in names {
            named.entry(module_name(&n)).or_default().extend(files.iter().cloned());
        }
    }
    let mut problems = Vec::new();
    for (m, files) in &modules {
        let Some(listed) = named.get(m) else {
            problems.push(format!("module {m} has no row in the module table of docs/architecture.md"));
            continue;
        };
        // A directory module's files (its `mod.rs` and `tests.rs` aside) are each named in
        // its row, as `name.rs` or, for a subdirectory, `name/`.
        for f in files {
            let rel = f.strip_prefix(src.join(m)).unwrap_or(f);
            if rel.components().count() == 0 || f.parent() == Some(&src) {
                continue;
            }
            let name = f.file_name().expect("a file name").to_string_lossy().to_string();
            if name == "mod.rs" || name == "tests.rs" {
                if rel.components().count() > 1 {
                    let dir = rel.iter().next().expect("a directory").to_string_lossy().to_string() + "/";
                    if !listed.contains(&dir) {
                        problems.push(format!("{m}/{dir} is not named in its row of the module table"));
                    }
                }
                continue;
            }
            if !listed.contains(&name) {
                problems.push(format!("{m}/{} is not named in its row of the module table", rel.display()));
            }
        }
    }
    for m in named.keys() {
        if !modules.contains_key(m) {
            problems.push(format!("the module table names {m}, which is not a module of the crate"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's module table does not match the tree:\n{}",
        problems.join("\n")
    );
}
