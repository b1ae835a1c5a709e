//! The rules of the code's shape, checked on the source parsed by `syn`:
//!
//! * **Layers.** The folders of `src/` are layers, and every path into the crate (`crate::…`,
//!   `super::…` resolved from the file's module, `use crate::{a::…, b}` groups, paths inside
//!   macro calls) names the same layer or one below it (the crate doc's "Layout"). An import
//!   that climbs (a backend reaching for the HTTP state, a leaf reaching for the registry)
//!   fails here with the file and line, so an import circle cannot come back. The crate root
//!   (`lib.rs`, `main.rs`) wires the layers together and is exempt.
//! * **Short functions.** No function (free, method or trait default) is longer than
//!   [`REQUEST_PATH_MAX_LINES`] lines in a request-path folder ([`REQUEST_PATH`]), or than
//!   [`ANYWHERE_MAX_LINES`] anywhere; tests are exempt.
//! * **No sibling cycles.** Within one folder, the files (and subfolders) are siblings; a
//!   path from one into another (`crate::…` or `super::…`, resolved to the sibling it lands
//!   in, through the folder's `mod.rs` re-exports) is an edge, and no edges may form a
//!   cycle. Like the layer rule, comments, doc links and test modules do not count.
//! * **Small `mod.rs`.** A `mod.rs` holds the folder's doc, its `mod` declarations and
//!   re-exports, and at most the folder's one main type: outside test modules, at most one
//!   `struct`, `enum`, `union` or `trait` definition, and no free function longer than
//!   [`MOD_RS_MAX_FN_LINES`] lines.
//! * **One home per module.** A module with a folder is that folder's `mod.rs`: no `x.rs`
//!   beside an `x/` folder, where it would hold the folder's code without the `mod.rs` rule.
//! * **The flow writes, the routes read.** No path from the front-door flow (`http/flow/`)
//!   lands in the operations routes (`http/ops/`): usage and the ledger's record are written
//!   by the flow's own steps, and `GET /v1/usage` or the ledger's routes only read them.
//!
//! Each rule is tested on planted violations too, so a blind spot in the check shows.

use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// Top to bottom. A module may use its own layer's code (within itself) and anything in a
/// lower row; modules of one row may not use each other.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["http"],
    &["engine", "quota", "ledger", "batch"],
    &["request"],
    &["models"],
    &["backend", "calibration"],
    &["question"],
    &["telemetry"],
    &["stores"],
    &["config"],
    &[
        "days",
        "draw",
        "error",
        "in_flight",
        "json",
        "metrics",
        "secret",
        "shipped",
    ],
];

/// The folders a request passes through.
const REQUEST_PATH: &[&str] = &["http", "engine", "request", "backend"];
/// Most lines of one function on the request path.
const REQUEST_PATH_MAX_LINES: usize = 60;
/// Most lines of one function anywhere.
const ANYWHERE_MAX_LINES: usize = 100;

/// Most lines of a free function in a `mod.rs` (a one-line helper beside the main type).
const MOD_RS_MAX_FN_LINES: usize = 5;

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

/// The module path of a file under `src/`: `http/mod.rs` → `[http]`, `http/edge/guard.rs`
/// → `[http, edge, guard]`, `lib.rs` → `[]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|s| s.trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The top-level module a path into the crate lands in, resolved from the module `from`:
/// `crate::a::…` → `a`; `super::…` climbs from `from`; `None` for other paths (other
/// crates, `self::`, local names) and for the crate root's own items.
fn target(segments: &[String], from: &[String]) -> Option<String> {
    let first = segments.first()?;
    if first == "crate" {
        return segments.get(1).cloned();
    }
    if first != "super" {
        return None;
    }
    let mut at = from.to_vec();
    let mut rest = segments;
    while rest.first().is_some_and(|s| s == "super") {
        at.pop()?;
        rest = &rest[1..];
    }
    at.first().cloned().or_else(|| rest.first().cloned())
}

/// Every path into the crate a file names, with its line.
#[derive(Default)]
struct Paths {
    found: Vec<(Vec<String>, usize)>,
}

impl Paths {
    /// `use` trees: each leaf path, groups expanded.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.push(prefix, Some(&n.ident), tree),
            syn::UseTree::Rename(r) => self.push(prefix, Some(&r.ident), tree),
            syn::UseTree::Glob(_) => self.push(prefix, None, tree),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn push(&mut self, prefix: &[String], last: Option<&syn::Ident>, at: &impl Spanned) {
        let mut path = prefix.to_vec();
        path.extend(last.map(|i| i.to_string()));
        self.found.push((path, at.span().start().line));
    }

    /// `crate :: a` and `super :: a` sequences inside macro calls, which syn leaves as tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            match tree {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if *id == "crate" || *id == "super" => {
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) =
                        (trees.get(j), trees.get(j + 1))
                    {
                        let Some(TokenTree::Ident(next)) = trees.get(j + 2) else {
                            break;
                        };
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(next.to_string());
                        j += 3;
                    }
                    self.found.push((path, id.span().start().line));
                }
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.found.push((segments, path.span().start().line));
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    /// Test modules may reach anywhere (they build fixtures).
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !is_test(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

fn parse(path: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

/// Each use of a higher (or same-row, other) layer: `file:line: a -> b`.
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        let module = module_path(path);
        let Some(from) = module.first().cloned() else {
            continue;
        };
        let Some(from_rank) = rank(&from) else {
            found.push(format!(
                "{}: module `{from}` is in no layer (add it to LAYERS and the crate doc)",
                path.display()
            ));
            continue;
        };
        let mut paths = Paths::default();
        paths.visit_file(&parse(path, text));
        for (segments, line) in paths.found {
            let Some(to) = target(&segments, &module) else {
                continue;
            };
            if to == from {
                continue;
            }
            match rank(&to) {
                Some(to_rank) if to_rank > from_rank => {}
                Some(_) => found.push(format!(
                    "{}:{line}: `{from}` uses `crate::{to}`, which is not below it",
                    path.display(),
                )),
                // The root's re-exports (`crate::app`, `crate::build_state`) are for the
                // commands only.
                None if from == "cli" => {}
                None => found.push(format!(
                    "{}:{line}: `{from}` uses the crate root's `crate::{to}`",
                    path.display(),
                )),
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Every function body's length in lines, outside test modules: `(name, line, lines)`.
#[derive(Default)]
struct Lengths {
    found: Vec<(String, usize, usize)>,
}

impl Lengths {
    fn note(&mut self, name: &syn::Ident, whole: &impl Spanned) {
        let (start, end) = (whole.span().start().line, whole.span().end().line);
        self.found.push((name.to_string(), start, end + 1 - start));
    }
}

impl<'ast> Visit<'ast> for Lengths {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            self.note(&f.sig.ident, f);
        }
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.note(&f.sig.ident, f);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() {
            self.note(&f.sig.ident, f);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !is_test(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }
}

/// Each function over its limit: `file:line: name is N lines, over M`.
fn long_functions(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        let on_request_path = module_path(path)
            .first()
            .is_some_and(|m| REQUEST_PATH.contains(&m.as_str()));
        let limit = if on_request_path {
            REQUEST_PATH_MAX_LINES
        } else {
            ANYWHERE_MAX_LINES
        };
        let mut lengths = Lengths::default();
        lengths.visit_file(&parse(path, text));
        for (name, line, lines) in lengths.found {
            if lines > limit {
                found.push(format!(
                    "{}:{line}: `{name}` is {lines} lines, over {limit}",
                    path.display()
                ));
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every file under `src/`, as `(path relative to src/, text)`.
fn sources() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    assert!(
        paths.len() > 20,
        "found only {} files under src/",
        paths.len()
    );
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable");
            (p.strip_prefix(&src).expect("under src").to_path_buf(), text)
        })
        .collect()
}

#[test]
fn every_import_points_down_the_layers() {
    let found = violations(&sources());
    assert!(
        found.is_empty(),
        "imports that climb:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_function_is_too_long() {
    let found = long_functions(&sources());
    assert!(
        found.is_empty(),
        "functions too long:\n{}",
        found.join("\n")
    );
}

fn planted(files: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect()
}

#[test]
fn the_check_catches_every_kind_of_climbing_path_and_an_unplaced_module() {
    let files = planted(&[
        (
            "backend/vllm.rs",
            "use crate::in_flight::InFlightPermit;\nuse crate::http::AppState;\n",
        ),
        // A comment is not a path; a string holding `//` does not hide the code after it.
        (
            "calibration/profile.rs",
            "// crate::engine in a comment is fine\nfn f() { let u = \"http://x\"; let d = crate::backend::Part::Text(t); }\n",
        ),
        ("metrics.rs", "fn f(m: &crate::models::Models) {}\n"),
        ("newthing.rs", ""),
        ("lib.rs", "pub use crate::http::AppState;"),
        // A group hides the climbing path among others.
        (
            "models/mod.rs",
            "use crate::{backend::Backend, http::wire};\n",
        ),
        // `super::` from a top-level `mod.rs` is the crate root.
        ("request/mod.rs", "use super::engine::Pipeline;\n"),
        // `super::super::` from a nested file climbs out of its layer.
        (
            "backend/openai/probe.rs",
            "use super::super::super::quota::Quotas;\nuse super::Host;\n",
        ),
        // Inside a macro call.
        (
            "config.rs",
            "fn f() { tracing::info!(x = %crate::metrics::X, y = ?crate::cli::Y); }\n",
        ),
        // Test modules may build fixtures from anywhere.
        (
            "error.rs",
            "#[cfg(test)]\nmod tests { use crate::http::AppState; }\n",
        ),
    ]);
    let found = violations(&files);
    let want = [
        "backend/openai/probe.rs:1: `backend` uses `crate::quota`",
        "backend/vllm.rs:2: `backend` uses `crate::http`",
        "calibration/profile.rs:2: `calibration` uses `crate::backend`",
        "config.rs:1: `config` uses `crate::cli`",
        "metrics.rs:1: `metrics` uses `crate::models`",
        "models/mod.rs:1: `models` uses `crate::http`",
        "newthing.rs: module `newthing` is in no layer",
        "request/mod.rs:1: `request` uses `crate::engine`",
    ];
    assert_eq!(found.len(), want.len(), "{found:#?}");
    for (got, want) in found.iter().zip(want) {
        assert!(
            got.starts_with(want),
            "{got:?} is not {want:?}:\n{found:#?}"
        );
    }
}

#[test]
fn the_check_catches_a_long_function_wherever_it_is() {
    let body = |lines: usize| "    let x = 1;\n".repeat(lines);
    let files = planted(&[
        // 61 lines on the request path: over 60.
        ("http/door.rs", &format!("fn long() {{\n{}}}\n", body(59))),
        // 60 lines there: fine.
        ("engine/ok.rs", &format!("fn fits() {{\n{}}}\n", body(58))),
        // 101 lines elsewhere, in a method: over 100.
        (
            "cli/eval.rs",
            &format!("impl X {{\n    fn svg() {{\n{}    }}\n}}\n", body(99)),
        ),
        // A trait's default method counts; a test does not.
        (
            "backend/mod.rs",
            &format!(
                "trait T {{\n    fn d() {{\n{}    }}\n}}\n#[cfg(test)]\nmod tests {{\n    fn t() {{\n{}    }}\n}}\n",
                body(70),
                body(200)
            ),
        ),
    ]);
    let found = long_functions(&files);
    let want = [
        "http/door.rs:1: `long` is 61 lines, over 60",
        "engine/ok.rs",
        "cli/eval.rs:2: `svg` is 101 lines, over 100",
        "backend/mod.rs:2: `d` is 72 lines, over 60",
    ];
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with(want[0]), "{found:#?}");
    assert!(!found.iter().any(|f| f.starts_with(want[1])), "{found:#?}");
    assert!(found[1].starts_with(want[2]), "{found:#?}");
    assert!(found[2].starts_with(want[3]), "{found:#?}");
}

/// The module path a crate path lands in, resolved from the module `from`: `crate::a::b` →
/// `[a, b]`, `super::x` → `from` minus its last segment plus `x`; `None` for other paths.
fn absolute(segments: &[String], from: &[String]) -> Option<Vec<String>> {
    let first = segments.first()?;
    if first == "crate" {
        return Some(segments[1..].to_vec());
    }
    if first != "super" {
        return None;
    }
    let mut at = from.to_vec();
    let mut rest = segments;
    while rest.first().is_some_and(|s| s == "super") {
        at.pop()?;
        rest = &rest[1..];
    }
    at.extend(rest.iter().cloned());
    Some(at)
}

/// Each folder's re-exports from its own children: `(folder, name)` → child, from its
/// `mod.rs` (`pub use child::{A, B as C}` names `A` and `C` in `child`).
fn reexports(
    files: &[(PathBuf, String)],
) -> std::collections::HashMap<(Vec<String>, String), String> {
    let mut map = std::collections::HashMap::new();
    for (path, text) in files {
        if path.file_name().is_none_or(|n| n != "mod.rs") {
            continue;
        }
        let folder = module_path(path);
        for item in parse(path, text).items {
            let syn::Item::Use(u) = item else { continue };
            let mut paths = Paths::default();
            paths.use_tree(&mut Vec::new(), &u.tree);
            for (segments, _) in paths.found {
                let segments: Vec<&String> = segments.iter().skip_while(|s| *s == "self").collect();
                if let (Some(child), Some(name)) = (segments.first(), segments.last()) {
                    if segments.len() >= 2 {
                        map.insert((folder.clone(), (*name).clone()), (*child).clone());
                    }
                }
            }
        }
    }
    map
}

/// Each cycle between siblings: `folder: a <-> b` for every pair of siblings that reach
/// each other (`crate` for the top-level modules), with one import of each direction.
fn sibling_cycles(files: &[(PathBuf, String)]) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(p, _)| module_path(p)).collect();
    let is_child = |folder: &[String], name: &str| {
        modules
            .iter()
            .any(|m| m.len() > folder.len() && m.starts_with(folder) && m[folder.len()] == name)
    };
    let reexported = reexports(files);
    // folder → (from sibling, to sibling) → where.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<(String, String), String>> = BTreeMap::new();
    for (path, text) in files {
        let from = module_path(path);
        let mut paths = Paths::default();
        paths.visit_file(&parse(path, text));
        for (segments, line) in paths.found {
            let Some(to) = absolute(&segments, &from) else {
                continue;
            };
            let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            let (Some(a), Some(b)) = (from.get(shared), to.get(shared)) else {
                continue;
            };
            let folder = from[..shared].to_vec();
            let b = if is_child(&folder, b) {
                b.clone()
            } else if let Some(child) = reexported.get(&(folder.clone(), b.clone())) {
                child.clone()
            } else {
                continue;
            };
            if *a != b {
                let at = format!("{}:{line}", path.display());
                edges
                    .entry(folder)
                    .or_default()
                    .entry((a.clone(), b))
                    .or_insert(at);
            }
        }
    }
    let mut found = Vec::new();
    for (folder, edges) in &edges {
        let reaches = |start: &str, goal: &str| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start.to_string()];
            while let Some(at) = stack.pop() {
                for (a, b) in edges.keys().filter(|(a, _)| *a == at) {
                    if b == goal {
                        return true;
                    }
                    if seen.insert(b.clone()) {
                        stack.push(b.clone());
                    }
                    let _ = a;
                }
            }
            false
        };
        for ((a, b), at) in edges {
            if a < b && reaches(b, a) {
                let name = if folder.is_empty() {
                    "crate".to_string()
                } else {
                    folder.join("/")
                };
                let back = edges
                    .get(&(b.clone(), a.clone()))
                    .map_or("(through others)", String::as_str);
                found.push(format!("{name}: {a} <-> {b} ({at}; {back})"));
            }
        }
    }
    found
}

/// Each `mod.rs` that holds more than its doc, declarations, re-exports and one main type.
fn crowded_mod_rs(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        if path.file_name().is_none_or(|n| n != "mod.rs") {
            continue;
        }
        let mut types = 0;
        let mut long_fns = Vec::new();
        for item in parse(path, text).items {
            match &item {
                syn::Item::Struct(_)
                | syn::Item::Enum(_)
                | syn::Item::Union(_)
                | syn::Item::Trait(_) => types += 1,
                syn::Item::Fn(f) if !is_test(&f.attrs) => {
                    let lines = f.span().end().line + 1 - f.span().start().line;
                    if lines > MOD_RS_MAX_FN_LINES {
                        long_fns.push(f.sig.ident.to_string());
                    }
                }
                _ => {}
            }
        }
        if types > 1 || !long_fns.is_empty() {
            found.push(format!(
                "{}: {types} types, free functions over {MOD_RS_MAX_FN_LINES} lines: [{}]",
                path.display(),
                long_fns.join(", ")
            ));
        }
    }
    found.sort();
    found
}

#[test]
fn no_sibling_files_import_each_other_in_a_cycle() {
    let found = sibling_cycles(&sources());
    assert!(found.is_empty(), "sibling cycles:\n{}", found.join("\n"));
}

#[test]
fn every_mod_rs_holds_at_most_one_main_type() {
    let found = crowded_mod_rs(&sources());
    assert!(
        found.is_empty(),
        "crowded mod.rs files:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_cycle_check_catches_a_planted_cycle_and_passes_a_chain() {
    let files = planted(&[
        // A cycle through `super::` and a re-export, and one through `crate::`.
        (
            "engine/mod.rs",
            "mod a;\nmod b;\nmod c;\npub use b::Thing;\n",
        ),
        (
            "engine/a.rs",
            "use super::Thing;\n// crate::engine::c in a comment is no edge\n",
        ),
        ("engine/b.rs", "fn f() { let _ = crate::engine::a::x(); }\n"),
        // c uses a, nothing uses c: a chain, not a cycle.
        (
            "engine/c.rs",
            "use super::a::x;\n/// [`crate::engine::c`]\nfn g() {}\n",
        ),
        // Nested: two files of one subfolder.
        ("models/tokens/p.rs", "use super::q::Q;\n"),
        ("models/tokens/q.rs", "use crate::models::tokens::p::P;\n"),
        // Test modules may build fixtures from a sibling.
        ("request/x.rs", "use super::y::Y;\n"),
        (
            "request/y.rs",
            "#[cfg(test)]\nmod tests { use super::super::x::X; }\n",
        ),
    ]);
    let found = sibling_cycles(&files);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("engine: a <-> b (engine/a.rs:1; engine/b.rs:1)"),
        "{found:#?}"
    );
    assert!(found[1].starts_with("models/tokens: p <-> q"), "{found:#?}");
}

#[test]
fn the_mod_rs_check_counts_types_and_long_free_functions() {
    let long = format!(
        "fn long() {{\n{}}}\n",
        "    let x = 1;\n".repeat(MOD_RS_MAX_FN_LINES)
    );
    let files = planted(&[
        // One main type with its impl and a one-line helper: fine.
        (
            "ledger/mod.rs",
            "mod a;\npub use a::A;\npub struct Main;\nimpl Main { fn f() {} }\nfn tiny() {}\n",
        ),
        // Two types.
        ("backend/mod.rs", "pub struct One;\npub enum Two { A }\n"),
        // A long free function; a test module does not count.
        (
            "request/mod.rs",
            &format!("{long}#[cfg(test)]\nmod tests {{ struct A; struct B; }}\n"),
        ),
        // Not a mod.rs.
        ("cli/serve.rs", "struct A;\nstruct B;\n"),
    ]);
    let found = crowded_mod_rs(&files);
    assert_eq!(
        found,
        [
            "backend/mod.rs: 2 types, free functions over 5 lines: []",
            "request/mod.rs: 0 types, free functions over 5 lines: [long]",
        ],
    );
}

/// Each `x.rs` that sits beside a folder `x/` of the same module.
fn files_beside_their_folder(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found: Vec<String> = files
        .iter()
        .filter_map(|(path, _)| {
            let folder = path.with_extension("");
            let beside = files
                .iter()
                .any(|(other, _)| other.parent() == Some(folder.as_path()));
            (path.extension().is_some_and(|e| e == "rs") && beside).then(|| {
                format!(
                    "{} beside {}/: move it to {}/mod.rs",
                    path.display(),
                    folder.display(),
                    folder.display()
                )
            })
        })
        .collect();
    found.sort();
    found
}

#[test]
fn no_file_sits_beside_its_own_folder() {
    let found = files_beside_their_folder(&sources());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_folder_check_catches_a_file_beside_its_folder() {
    let files = planted(&[
        ("http/auth.rs", "mod jwt;\n"),
        ("http/auth/jwt.rs", "fn f() {}\n"),
        ("engine/mod.rs", "mod a;\n"),
        ("engine/a.rs", "fn f() {}\n"),
        ("lib.rs", "mod engine;\n"),
    ]);
    assert_eq!(
        files_beside_their_folder(&files),
        ["http/auth.rs beside http/auth/: move it to http/auth/mod.rs"]
    );
}

/// Each path from the front-door flow (`http/flow/`) into the operations routes
/// (`http/ops/`): what the flow writes (usage, the ledger's record) is its own step, and
/// the routes only read it back.
fn flow_into_routes(files: &[(PathBuf, String)]) -> Vec<String> {
    let flow = ["http".to_string(), "flow".to_string()];
    let ops = ["http".to_string(), "ops".to_string()];
    let mut found = Vec::new();
    for (path, text) in files {
        let from = module_path(path);
        if !from.starts_with(&flow) {
            continue;
        }
        let mut paths = Paths::default();
        paths.visit_file(&parse(path, text));
        for (segments, line) in paths.found {
            if absolute(&segments, &from).is_some_and(|to| to.starts_with(&ops)) {
                found.push(format!(
                    "{}:{line}: {}",
                    path.display(),
                    segments.join("::")
                ));
            }
        }
    }
    found
}

#[test]
fn the_flow_never_reaches_into_the_routes() {
    let found = flow_into_routes(&sources());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_route_check_catches_the_flow_using_a_route_file() {
    let files = planted(&[
        ("http/flow/run.rs", "use crate::http::ops::usage;\n"),
        (
            "http/flow/step.rs",
            "fn f() { super::super::ops::ledger::list(); }\n",
        ),
        (
            "http/flow/fine.rs",
            "use crate::http::context::RequestContext;\n",
        ),
        ("http/doors/door.rs", "use crate::http::ops::usage;\n"),
    ]);
    let found = flow_into_routes(&files);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("http/flow/run.rs:1"), "{found:#?}");
    assert!(found[1].starts_with("http/flow/step.rs:1"), "{found:#?}");
}
