//! The book's generated reference pages (`docs/reference/`: every `serve` flag, every error
//! code, every metric) are what `systemone docs` writes from the code today. A flag, code or
//! metric added without regenerating them fails here, naming the page, its first differing
//! line and the command that regenerates it.

use std::path::PathBuf;

use systemone::cli::docs::{pages, REGENERATE};

/// The first line where `committed` and `generated` differ, as both have it.
fn first_difference(committed: &str, generated: &str) -> String {
    let (mut old, mut new) = (committed.lines(), generated.lines());
    for number in 1.. {
        match (old.next(), new.next()) {
            (None, None) => break,
            (a, b) if a == b => continue,
            (a, b) => {
                return format!(
                    "line {number}:\n  committed: {}\n  generated: {}",
                    a.unwrap_or("(end of file)"),
                    b.unwrap_or("(end of file)")
                )
            }
        }
    }
    "only in line endings".to_string()
}

/// Proves every committed reference page equals what `systemone docs` generates now.
#[test]
fn every_reference_page_is_current() {
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs");
    for page in pages() {
        let committed = std::fs::read_to_string(docs.join(page.path)).unwrap_or_default();
        assert!(
            committed == page.text,
            "docs/{} is stale: run `{REGENERATE}` to regenerate it ({})",
            page.path,
            first_difference(&committed, &page.text)
        );
    }
}
