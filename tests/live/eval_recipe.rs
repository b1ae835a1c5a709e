//! The book's first `systemone eval` recipe (`docs/evaluation.md`), run as printed against
//! the local default, with zero failed lines. The block after the marker is read from the
//! page itself, so the page cannot drift from what works; only the two machine-specific
//! words change: the release binary becomes the binary cargo built for this test, and
//! run-local's backend address becomes the test's llama-server (`SYSTEMONE_LLAMA_URL`, from
//! `scripts/test.sh`). It runs in a temporary directory (with the repository's `scripts/`
//! linked in), so the data file it writes stays out of the repository.

const MARKER: &str = "<!-- the first eval, run as printed by tests/live/eval_recipe.rs -->";

/// The shell lines of the fenced block after [`MARKER`].
fn recipe() -> Vec<String> {
    let readme = include_str!("../../docs/evaluation.md");
    let after = readme
        .split_once(MARKER)
        .unwrap_or_else(|| panic!("docs/evaluation.md has no {MARKER}"))
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a ```sh block after the marker")
        .0;
    block
        .lines()
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// Proves the recipe, as the book prints it, builds its data and scores every line of it
/// against Gemma 3 270M on llama-server: the eval's last summary line reports ten answers
/// from ten lines and zero failures.
#[test]
fn the_readme_eval_recipe_runs_as_printed_with_no_failed_line() {
    let llama = crate::support::require("SYSTEMONE_LLAMA_URL", "scripts/start-llama.sh");
    let lines = recipe();
    assert_eq!(lines.len(), 2, "the recipe is two commands: {lines:?}");
    assert!(
        lines[1].contains("target/release/systemone")
            && lines[1].contains("http://127.0.0.1:8081/v1"),
        "{lines:?}"
    );
    let script = lines
        .iter()
        .map(|l| {
            l.replace("target/release/systemone", env!("CARGO_BIN_EXE_systemone"))
                .replace("http://127.0.0.1:8081/v1", llama.trim_end_matches('/'))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dir = std::env::temp_dir().join(format!("systemone-eval-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let scripts = dir.join("scripts");
    if !scripts.exists() {
        std::os::unix::fs::symlink(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts"), &scripts)
            .expect("link scripts/");
    }
    let output = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dir)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the recipe failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let summary = stdout
        .lines()
        .find(|l| l.contains(" answers from "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    assert!(
        summary.starts_with("10 answers from 10 lines") && summary.ends_with(", 0 failures"),
        "{summary}\n{stdout}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
