//! `systemone batch`: a JSONL file run as a batch job on a running service, for people
//! without OpenAI's SDK: uploads the file (`POST /v1/files`), creates the batch
//! (`POST /v1/batches`), follows it with a progress bar until it ends, and writes its output
//! file and error file.
//!
//! ```sh
//! SYSTEMONE_BATCH_API_KEY=sk-… systemone batch --url http://127.0.0.1:8080 \
//!   --endpoint /v1/systemone --input tickets.jsonl --output answers.jsonl [--errors errors.jsonl]
//! ```
//!
//! A batch already created is followed again with `--follow batch_…` (after a lost
//! connection, or from another machine).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use crate::secret::Secret;

/// `systemone batch` arguments.
#[derive(Debug, Clone, Args)]
pub struct BatchArgs {
    /// The service's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The API key to ask with; never printed.
    #[arg(long, env = "SYSTEMONE_BATCH_API_KEY", hide_env_values = true)]
    pub api_key: Option<Secret>,
    /// The JSONL file to run (one `{"custom_id", "method", "url", "body"}` a line).
    #[arg(long, required_unless_present = "follow")]
    pub input: Option<PathBuf>,
    /// Follow this batch (already created) instead of submitting a file.
    #[arg(long, conflicts_with = "input")]
    pub follow: Option<String>,
    /// The door every line goes to.
    #[arg(long, default_value = "/v1/systemone")]
    pub endpoint: String,
    /// The batch's completion window, `<hours>h`.
    #[arg(long, default_value = "24h")]
    pub window: String,
    /// Where to write the output file (the answered lines).
    #[arg(long)]
    pub output: PathBuf,
    /// Where to write the error file (the refused lines; default: OUTPUT with `.errors`).
    #[arg(long)]
    pub errors: Option<PathBuf>,
    /// Milliseconds between two looks at the batch.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub poll_ms: u64,
    /// Hide the progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
}

const BOUNDARY: &str = "systemone-batch-upload-5d1c";

/// Runs the command.
pub fn run_command(args: &BatchArgs) -> Result<(), String> {
    super::runtime()?
        .block_on(run(args))
        .map_err(|e| format!("batch: {e}"))
}

async fn run(args: &BatchArgs) -> Result<(), String> {
    let service = Service::new(args);
    let id = match (&args.follow, &args.input) {
        (Some(id), _) => id.clone(),
        (None, Some(input)) => submit(&service, args, input).await?,
        (None, None) => return Err("--input or --follow is required".into()),
    };
    eprintln!("batch {id}");
    let batch = follow(&service, &id, args).await?;
    let errors = args
        .errors
        .clone()
        .unwrap_or_else(|| args.output.with_extension("errors.jsonl"));
    for (field, path) in [("output_file_id", &args.output), ("error_file_id", &errors)] {
        let file = batch[field]
            .as_str()
            .ok_or("the batch names no output file")?;
        let bytes = service.content(file).await?;
        std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let counts = &batch["request_counts"];
    eprintln!(
        "{}: {} answered, {} in {}, output in {}",
        batch["status"].as_str().unwrap_or("?"),
        counts["completed"],
        counts["failed"],
        errors.display(),
        args.output.display()
    );
    match batch["status"].as_str() {
        Some("completed") => Ok(()),
        other => Err(format!("the batch ended {}", other.unwrap_or("?"))),
    }
}

/// Uploads `input` and creates the batch; its id.
async fn submit(service: &Service, args: &BatchArgs, input: &PathBuf) -> Result<String, String> {
    let content = std::fs::read(input)
        .map_err(|e| format!("cannot read {} (--input): {e}", input.display()))?;
    let mut form = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n").into_bytes();
    form.extend_from_slice(&content);
    form.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let request = service
        .post("/v1/files")
        .header("content-type", content_type)
        .body(form);
    let file = service.send(request).await?;
    let body = json!({"input_file_id": file["id"], "endpoint": args.endpoint, "completion_window": args.window});
    let batch = service
        .send(service.post("/v1/batches").json(&body))
        .await?;
    batch["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the service answered no batch id".into())
}

/// Looks at the batch every `--poll-ms`, the bar showing its finished lines, until it ends.
async fn follow(service: &Service, id: &str, args: &BatchArgs) -> Result<Value, String> {
    let bar = bar(args.quiet);
    loop {
        let batch = service
            .send(service.get(&format!("/v1/batches/{id}")))
            .await?;
        let counts = &batch["request_counts"];
        let done =
            counts["completed"].as_u64().unwrap_or(0) + counts["failed"].as_u64().unwrap_or(0);
        bar.set_length(counts["total"].as_u64().unwrap_or(0));
        bar.set_position(done);
        bar.set_message(batch["status"].as_str().unwrap_or("").to_string());
        if ["completed", "expired", "cancelled", "failed"]
            .contains(&batch["status"].as_str().unwrap_or(""))
        {
            bar.finish();
            return Ok(batch);
        }
        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
    }
}

/// A progress bar on stderr, drawn only on a terminal.
fn bar(quiet: bool) -> ProgressBar {
    let target = if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let bar = ProgressBar::with_draw_target(Some(0), target);
    if let Ok(style) = ProgressStyle::with_template(
        "batch {bar:30} {pos}/{len} lines · {per_sec} · ETA {eta} · {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The service, its key and a client.
struct Service {
    url: String,
    key: Option<Secret>,
    client: reqwest::Client,
}

impl Service {
    fn new(args: &BatchArgs) -> Self {
        Service {
            url: args.url.trim_end_matches('/').to_string(),
            key: args.api_key.clone(),
            client: reqwest::Client::new(),
        }
    }

    fn with_key(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(key) => request.bearer_auth(key.expose()),
            None => request,
        }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.with_key(self.client.post(format!("{}{path}", self.url)))
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.with_key(self.client.get(format!("{}{path}", self.url)))
    }

    /// Sends `request`; its JSON answer, or the service's error message.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, String> {
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach {} (--url): {e}", self.url))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("the service answered {status} without JSON: {e}"))?;
        if status.is_success() {
            Ok(body)
        } else {
            let message = body["error"]["message"].as_str().unwrap_or("no message");
            Err(format!("the service answered {status}: {message}"))
        }
    }

    /// File `id`'s bytes.
    async fn content(&self, id: &str) -> Result<Vec<u8>, String> {
        let response = self
            .get(&format!("/v1/files/{id}/content"))
            .send()
            .await
            .map_err(|e| format!("cannot reach {} (--url): {e}", self.url))?;
        if !response.status().is_success() {
            return Err(format!(
                "the service answered {} for file {id}",
                response.status()
            ));
        }
        Ok(response.bytes().await.map_err(|e| e.to_string())?.to_vec())
    }
}
