//! The layering rule, checked on the source: the folders of `src/` are layers, and every
//! `crate::…` path in a layer names the same layer or one below it (the crate doc's
//! "Layout"). An import that climbs (a backend reaching for the HTTP state, a leaf reaching
//! for the registry) fails here with the file and line, so an import circle cannot come
//! back. The crate root (`lib.rs`, `main.rs`) wires the layers together and is exempt.

use std::path::{Path, PathBuf};

/// Top to bottom. A module may use its own layer's code (within itself) and anything in a
/// lower row; modules of one row may not use each other.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["http"],
    &["engine", "quota"],
    &["request"],
    &["models"],
    &["backend", "calibration"],
    &["question"],
    &["config"],
    &["error", "json", "limits", "metrics", "secret", "shipped"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

/// The top-level module a file under `src/` belongs to (`None` for the crate root).
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// Every `crate::<module>` named on a line, comments left out.
fn crate_paths(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    code.match_indices("crate::")
        .filter(|(i, _)| {
            // `systemone_crate::` or `$crate::` are not this crate's paths.
            !code[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .filter_map(|(i, m)| {
            let rest = &code[i + m.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Each use of a higher (or same-row, other) layer: `file:line: a -> b`.
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        let Some(from) = module_of(path) else {
            continue;
        };
        let Some(from_rank) = rank(&from) else {
            found.push(format!(
                "{}: module `{from}` is in no layer (add it to LAYERS and the crate doc)",
                path.display()
            ));
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for to in crate_paths(line) {
                if to == from {
                    continue;
                }
                match rank(&to) {
                    Some(to_rank) if to_rank > from_rank => {}
                    Some(_) => found.push(format!(
                        "{}:{}: `{from}` uses `crate::{to}`, which is not below it",
                        path.display(),
                        n + 1
                    )),
                    // The root's re-exports (`crate::app`, `crate::build_state`) are for
                    // the commands only.
                    None if from == "cli" => {}
                    None => found.push(format!(
                        "{}:{}: `{from}` uses the crate root's `crate::{to}`",
                        path.display(),
                        n + 1
                    )),
                }
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

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    assert!(
        paths.len() > 20,
        "found only {} files under src/",
        paths.len()
    );
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable");
            (p.strip_prefix(&src).expect("under src").to_path_buf(), text)
        })
        .collect();
    let found = violations(&files);
    assert!(
        found.is_empty(),
        "imports that climb:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_catches_a_climbing_import_and_an_unplaced_module() {
    let files = vec![
        (
            PathBuf::from("backend/vllm.rs"),
            "use crate::limits::InFlightPermit;\nuse crate::http::AppState;\n".to_string(),
        ),
        (
            PathBuf::from("calibration/profile.rs"),
            "// crate::engine in a comment is fine\nlet d = crate::backend::Part::Text(t);\n"
                .to_string(),
        ),
        (
            PathBuf::from("metrics.rs"),
            "fn f(m: &crate::models::Models) {}\n".to_string(),
        ),
        (PathBuf::from("newthing.rs"), String::new()),
        (
            PathBuf::from("lib.rs"),
            "pub use crate::http::AppState;".to_string(),
        ),
    ];
    let found = violations(&files);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("backend/vllm.rs:2: `backend` uses `crate::http`"));
    assert!(found[1].starts_with("calibration/profile.rs:2: `calibration` uses `crate::backend`"));
    assert!(found[2].starts_with("metrics.rs:1: `metrics` uses `crate::models`"));
    assert!(found[3].contains("`newthing` is in no layer"));
}
