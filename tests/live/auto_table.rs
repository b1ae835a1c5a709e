//! `--token-table auto` over the real llama-server with Gemma 3 270M
//! (`SYSTEMONE_LLAMA_URL`): `systemone tokens build --backend llamacpp` writes the shipped
//! `gemma-3` table, and a service on `auto` answers with the same probabilities as one on
//! `gemma-3`. The same rules over the fake vLLM are in the hermetic tier
//! (`tests/hermetic/auto_table.rs`).

use std::process::Command;

use crate::setup::assert_same_read;
use crate::setup::llama::{backend_turn, llama_config, MODEL as LLAMA_MODEL};
use crate::support;
use crate::support::answers::probabilities;
use crate::support::bodies::one_choice;
use crate::support::{ask, table_built};
use systemone::models::tokens::TokenTable;

/// `systemone tokens build --backend llamacpp` against the real llama-server (Gemma 3 270M)
/// writes the shipped `gemma-3` table: same prefix ids, labels and schemes (letters
/// included); only the recorded tokenizer differs (the server, not a file). A service on
/// `auto` then answers a 4-option and an 11-option question with the probabilities a
/// service on `gemma-3` gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_built_from_llama_server_is_the_shipped_gemma_3() {
    let (url, _turn) = backend_turn().await;
    let out = support::temp_file("gemma-live.json", "");
    let status = Command::new(env!("CARGO_BIN_EXE_systemone"))
        .args([
            "tokens",
            "build",
            "--backend",
            "llamacpp",
            "--backend-url",
            &url,
        ])
        .args([
            "--upstream-model",
            LLAMA_MODEL,
            "--name",
            "gemma-3",
            "--out",
        ])
        .arg(&out)
        .status()
        .expect("systemone runs");
    assert!(status.success());
    let live = TokenTable::load(out.to_str().expect("utf-8 path")).expect("a table");
    let shipped = TokenTable::load("gemma-3").expect("shipped");
    assert_eq!(live.prefix_ids, shipped.prefix_ids);
    assert_eq!(live.labels, shipped.labels);
    assert_eq!(live.multi_token, shipped.multi_token);
    assert_eq!(live.tokenizer.name, format!("llamacpp {LLAMA_MODEL}"));

    let exact = ["--cache-prompt", "false", "--read-timeout-secs", "300"];
    let auto = support::start(auto_llama(&url, &exact)).await;
    table_built(&auto).await;
    let file = support::start(llama_config(&url, &exact)).await;
    for n in [4, 11] {
        let a = ask(&auto, &one_choice(n)).await;
        assert_eq!(a.status, 200, "{}", a.text);
        let f = ask(&file, &one_choice(n)).await;
        assert_eq!(f.status, 200, "{}", f.text);
        let (pa, pf) = (
            probabilities(&a.body["answers"]["q"]),
            probabilities(&f.body["answers"]["q"]),
        );
        assert_eq!(pa.len(), pf.len(), "{n} options");
        for (i, (x, y)) in pa.iter().zip(&pf).enumerate() {
            assert_same_read(*x, *y, &format!("{n} options, p[{i}]"));
        }
    }
}

/// The llama.cpp configuration of [`llama_config`] with `--token-table auto`.
fn auto_llama(url: &str, extra: &[&str]) -> systemone::config::ServeConfig {
    let mut flags = vec!["--model", LLAMA_MODEL, "--token-table", "auto"];
    flags.extend_from_slice(extra);
    support::llamacpp_config(url, &flags)
}
