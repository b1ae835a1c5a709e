//! Every example in the README and the book, exercised so none drifts from the service:
//!
//! * every answer shown as a real one (the README's, `docs/api/systemone.md`'s, the models
//!   list of `docs/api/models.md`) is what the service answers that request on the fake
//!   vLLM, exactly: the golden case it is taken from is replayed, and the JSON compared
//!   value for value;
//! * an answer marked illustrative (`docs/request.md`, `docs/api/decisions.md`,
//!   `docs/api/rerank.md`) has exactly the fields, in the same
//!   places and of the same kinds, as the service's answer to the request beside it;
//! * every `curl` that sends a body gets a 200 from the service on the fake for that body,
//!   sent to the route the command names (the caller's key left out: the service is open);
//! * every `systemone` command line names only a subcommand and flags the binary has;
//! * every `json` block parses;
//! * the `python` blocks run with the official SDKs in the live tier (`tests/live/examples.rs`).

use std::path::PathBuf;

use clap::CommandFactory;
use serde_json::Value;

use crate::setup::ids_of;
use crate::support;
use crate::support::fake_vllm::FakeVllm;

/// The README's (and the systemone page's) answer is this golden case replayed.
const GOLDEN_CASE: &str = "spec_ex1_three_options_null_description";

/// A fenced block of a page: the page, the block's language and its text.
struct Block {
    page: String,
    lang: String,
    text: String,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every Markdown page of the book, as paths relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    let mut dirs = vec![repo().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let rel = path.strip_prefix(repo()).expect("under the repository");
                pages.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    pages.sort();
    pages
}

fn read(page: &str) -> String {
    std::fs::read_to_string(repo().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// The fenced blocks of `page`, in order.
fn blocks(page: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in read(page).lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some(_)) => {
                let (lang, text) = open.take().expect("an open block");
                found.push(Block {
                    page: page.to_string(),
                    lang,
                    text,
                });
            }
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    found
}

fn all_blocks() -> Vec<Block> {
    pages().iter().flat_map(|p| blocks(p)).collect()
}

/// A shell block's commands: continuation lines and quotes spanning lines joined, comments
/// dropped.
fn commands(block: &Block) -> Vec<String> {
    let mut found = Vec::new();
    let mut current = String::new();
    for line in block.text.replace("\\\n", " ").lines() {
        current.push_str(line);
        if current.matches('\'').count() % 2 == 1 {
            current.push('\n');
            continue;
        }
        let command = current
            .split(" # ")
            .next()
            .unwrap_or(&current)
            .trim()
            .to_string();
        if !command.is_empty() && !command.starts_with('#') {
            found.push(command);
        }
        current.clear();
    }
    found
}

fn shell_blocks() -> Vec<Block> {
    all_blocks()
        .into_iter()
        .filter(|b| b.lang == "sh")
        .collect()
}

/// A `curl` command's route (the URL's path) and its `-d '…'` body, when it sends one.
fn curl_request(command: &str) -> Option<(String, Value)> {
    let url = command
        .split_whitespace()
        .find(|w| w.contains("localhost:") || w.contains("127.0.0.1:"))?;
    let url = url.trim_matches('\'').trim_start_matches("http://");
    let path = url.split_once('/')?.1;
    let route = format!("/{}", path.split('?').next().unwrap_or(path));
    let body = command.split_once(" -d '")?.1.rsplit_once('\'')?.0;
    let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("{command}: body: {e}"));
    Some((route, json))
}

/// Every `curl` with a body in the README and the book, with the page it is on.
fn curls() -> Vec<(String, String, Value)> {
    let mut found = Vec::new();
    for block in shell_blocks() {
        for command in commands(&block) {
            if command.starts_with("curl ") {
                if let Some((route, body)) = curl_request(&command) {
                    found.push((block.page.clone(), route, body));
                }
            }
        }
    }
    found
}

/// The JSON block right after the `sh` block holding `curl` to `route`, on `page`.
fn answer_after_curl(page: &str, route: &str) -> (Value, Value) {
    let blocks = blocks(page);
    let at = blocks
        .iter()
        .position(|b| b.lang == "sh" && b.text.contains(route) && b.text.contains("curl"))
        .unwrap_or_else(|| panic!("{page}: no curl to {route}"));
    let request = commands(&blocks[at])
        .iter()
        .find_map(|c| curl_request(c))
        .map(|r| r.1);
    let answer = blocks.get(at + 1).filter(|b| b.lang == "json");
    let answer = answer.unwrap_or_else(|| panic!("{page}: no json answer after the curl"));
    let answer = serde_json::from_str(&answer.text).unwrap_or_else(|e| panic!("{page}: {e}"));
    (request.unwrap_or(Value::Null), answer)
}

/// Proves every `json` block of the README and the book parses.
#[test]
fn every_json_block_parses() {
    for block in all_blocks().into_iter().filter(|b| b.lang == "json") {
        if let Err(e) = serde_json::from_str::<Value>(&block.text) {
            panic!(
                "{}: a json block does not parse: {e}\n{}",
                block.page, block.text
            );
        }
    }
}

/// Proves every `systemone …` command line in the README and the book names a real
/// subcommand and only flags it has (usage lines' `[--flag …]` included).
#[test]
fn every_documented_command_names_real_flags() {
    let mut checked = 0;
    for block in shell_blocks() {
        for command in commands(&block) {
            if let Some(words) = systemone_words(&command) {
                check_flags(&block.page, &command, &words);
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} systemone command lines found"
    );
}

/// The words after the binary, for a line that runs `systemone` (however it is invoked).
fn systemone_words(command: &str) -> Option<Vec<String>> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let at = words.iter().position(|w| {
        matches!(*w, "systemone" | "target/release/systemone")
            || *w == "--" && words.first() == Some(&"cargo")
    })?;
    if words.first() == Some(&"cargo") && !words.contains(&"run") {
        return None;
    }
    Some(words[at + 1..].iter().map(|w| w.to_string()).collect())
}

/// Fails unless the leading words name a subcommand and every `--flag` is one of its own.
fn check_flags(page: &str, command: &str, words: &[String]) {
    let mut cmd = systemone::cli::Cli::command();
    let mut rest = words;
    while let Some(sub) = rest.first().and_then(|w| cmd.find_subcommand(w).cloned()) {
        cmd = sub;
        rest = &rest[1..];
    }
    assert!(
        cmd.get_name() != "systemone",
        "{page}: `{command}` names no subcommand of systemone"
    );
    for word in rest
        .iter()
        .filter_map(|w| w.trim_start_matches('[').strip_prefix("--"))
    {
        let flag = word.split(['=', ']']).next().unwrap_or(word);
        assert!(
            cmd.get_arguments().any(|a| a.get_long() == Some(flag)),
            "{page}: `{command}`: `systemone {}` has no flag --{flag}",
            cmd.get_name()
        );
    }
}

/// Proves every `curl` that sends a body is answered 200 by the service on the fake vLLM.
#[tokio::test]
async fn every_curl_body_is_answered() {
    let (_fake, service) = support::setup(&["--alias", "gemma-3-270m"]).await;
    let curls = curls();
    assert!(
        curls.len() >= 5,
        "only {} curls with a body found",
        curls.len()
    );
    for (page, route, body) in curls {
        let reply = support::post(&service.client, &service.url(&route), &body).await;
        assert_eq!(reply.status, 200, "{page}: POST {route}: {}", reply.text);
    }
}

/// Proves the README's answer and the systemone page's are the service's, value for value.
#[tokio::test]
async fn the_documented_answers_are_the_services() {
    for page in ["README.md", "docs/api/systemone.md"] {
        let (fake, service) = support::setup(&[]).await;
        replay_golden_case(&fake);
        let (request, documented) = answer_after_curl(page, "/v1/systemone");
        let reply = support::ask(&service, &request).await;
        assert_eq!(
            reply.body, documented,
            "{page}: the answer shown is not the service's"
        );
    }
}

/// Proves the models page shows what `GET /v1/models` answers.
#[tokio::test]
async fn the_documented_models_list_is_the_services() {
    let (_fake, service) = support::setup(&[]).await;
    let (_, documented) = answer_after_curl("docs/api/models.md", "/v1/models");
    let reply = support::get(&service, "/v1/models").await;
    assert_eq!(
        reply.body, documented,
        "docs/api/models.md: not the service's list"
    );
}

/// The pages whose answer is illustrative, and the route their `curl` calls.
const ILLUSTRATIVE: [(&str, &str); 3] = [
    ("docs/request.md", "/v1/systemone"),
    ("docs/api/decisions.md", "/v1/decisions"),
    ("docs/api/rerank.md", "/v2/rerank"),
];

/// Proves each illustrative answer (the request walk-through's, the Decisions and Rerank
/// pages') has the fields the service answers its request with, in the same places and of
/// the same kinds; the page's model is the fake's (`glm-5.3-flash`) for the call.
#[tokio::test]
async fn the_illustrative_answers_have_the_services_shape() {
    let (_fake, service) = support::setup(&[]).await;
    for (page, route) in ILLUSTRATIVE {
        let (mut request, documented) = answer_after_curl(page, route);
        if request.get("model").is_some() {
            request["model"] = Value::from("glm-5.3-flash");
        }
        let reply = support::post(&service.client, &service.url(route), &request).await;
        assert_eq!(reply.status, 200, "{page}: {}", reply.text);
        assert_eq!(shape(&documented), shape(&reply.body), "{page}");
    }
}

/// A value's shape: its keys and kinds, with every number and string alike.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), shape(v))).collect(),
        Value::Array(items) => items.iter().map(shape).collect(),
        Value::Number(_) => Value::from("number"),
        Value::String(_) => Value::from("string"),
        other => other.clone(),
    }
}

/// Installs [`GOLDEN_CASE`]'s recorded reads in the fake, so it answers as recorded.
fn replay_golden_case(fake: &FakeVllm) {
    let cases = include_str!("../golden/reference-cases.jsonl");
    let case: Value = cases
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a case"))
        .find(|c| c["name"] == GOLDEN_CASE)
        .expect("the golden case");
    let reads = case["requests"].as_array().expect("requests");
    for (read, answer) in reads
        .iter()
        .zip(case["responses"].as_array().expect("responses"))
    {
        let ids = ids_of(&read["body"]["logprob_token_ids"]);
        fake.record(&read["body"]["messages"][0]["content"], ids, answer.clone());
    }
}
