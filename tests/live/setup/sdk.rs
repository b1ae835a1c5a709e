//! The official SDKs and the programs that run them: a Python with the TypeSafe, OpenAI and
//! Cohere SDKs (`SYSTEMONE_PYTHON`, else the project's `.venv`), the npm SDK's install
//! prefix (`SYSTEMONE_NPM_SDK`) and node.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::require;

/// Runs `program args` with `env`, returning stdout; panics with stderr on failure.
pub async fn run_program(
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
) -> String {
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(&program)
            .args(&args)
            .envs(env)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{} {args:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    })
    .await
    .expect("runner")
}

/// The Python that has `typesafe-sdk[zstd]` 0.7.5, `openai` 3.51.0 and `cohere` 7.3.1:
/// `$SYSTEMONE_PYTHON`, else the project's `.venv` when `scripts/test.sh` made it.
pub fn sdk_python() -> PathBuf {
    let venv = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python"));
    if std::env::var_os("SYSTEMONE_PYTHON").is_none() && venv.exists() {
        return venv;
    }
    let path = PathBuf::from(require("SYSTEMONE_PYTHON", "scripts/test.sh"));
    assert!(
        path.exists(),
        "SYSTEMONE_PYTHON={} does not exist",
        path.display()
    );
    path
}

/// Where `scripts/fetch-npm-sdk.sh` installed `@typesafe-ai/sdk` 0.6.0 (its prefix).
pub fn npm_sdk() -> PathBuf {
    let prefix = PathBuf::from(require("SYSTEMONE_NPM_SDK", "scripts/fetch-npm-sdk.sh"));
    let package = prefix.join("node_modules/@typesafe-ai/sdk/package.json");
    assert!(
        package.exists(),
        "no @typesafe-ai/sdk under SYSTEMONE_NPM_SDK={}: run scripts/fetch-npm-sdk.sh",
        prefix.display()
    );
    prefix
}

/// The node that runs the npm SDK: `$SYSTEMONE_NODE`, else `node` on `PATH`.
pub fn node() -> PathBuf {
    std::env::var_os("SYSTEMONE_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"))
}

/// Runs an SDK script of `tests/sdk/` with `python` against `base_url` (as
/// `TYPESAFE_BASE_URL`, with any API key) and returns the JSON lines it printed; fails with
/// its output when it fails.
pub async fn run_typesafe_script(python: &Path, script: &str, base_url: String) -> Vec<Value> {
    run_typesafe_script_as(
        python,
        script,
        base_url,
        &[("TYPESAFE_API_KEY", "sk-any-value-works")],
    )
    .await
}

/// [`run_typesafe_script`] with the environment `env` (its API key among them).
pub async fn run_typesafe_script_as(
    python: &Path,
    script: &str,
    base_url: String,
    env: &[(&str, &str)],
) -> Vec<Value> {
    let path = format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    let program = python.to_path_buf();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&program)
            .arg(path)
            .env("TYPESAFE_BASE_URL", base_url)
            .envs(env)
            .env_remove("TYPESAFE_DEFAULT_MODEL")
            .env_remove("TYPESAFE_LOG_LEVEL")
            .output()
    })
    .await
    .expect("the SDK run joins")
    .unwrap_or_else(|e| panic!("cannot run SYSTEMONE_PYTHON={}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK script failed ({}); is typesafe-sdk[zstd]==0.7.5 installed in {}?\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status,
        python.display()
    );
    json_lines(&stdout)
}

/// A script's stdout as JSON lines.
pub fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The one JSON line an SDK script printed for `scenario`.
pub fn scenario<'a>(lines: &'a [Value], name: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["scenario"] == name)
        .unwrap_or_else(|| panic!("the SDK script printed no {name:?} line: {lines:?}"))
}
