//! `systemone usage`: a running service's `GET /v1/usage`, printed as a table or CSV.
//!
//! ```sh
//! SYSTEMONE_USAGE_API_KEY=sk-admin systemone usage --url http://127.0.0.1:8080 \
//!   [--key NAME] [--from 2026-12-01] [--to 2026-12-31] [--format table|csv]
//! ```
//!
//! It asks the service rather than reading the store itself: the embedded store's file is
//! locked by the service that has it open, and the service is what applies the admin rule.

use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::secret::Secret;

/// How the rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UsageFormat {
    /// Aligned columns, for people.
    Table,
    /// Comma-separated with a header line, for spreadsheets and scripts.
    Csv,
}

/// `systemone usage` arguments.
#[derive(Debug, Clone, Args)]
pub struct UsageArgs {
    /// The service's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The API key to ask with (the admin key reads every key's usage); never printed.
    #[arg(long, env = "SYSTEMONE_USAGE_API_KEY", hide_env_values = true)]
    pub api_key: Option<Secret>,
    /// Only this key's usage (by its configured name).
    #[arg(long)]
    pub key: Option<String>,
    /// First UTC day, `YYYY-MM-DD` (default: today).
    #[arg(long)]
    pub from: Option<String>,
    /// Last UTC day, `YYYY-MM-DD`, inclusive (default: today).
    #[arg(long)]
    pub to: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = UsageFormat::Table)]
    pub format: UsageFormat,
}

/// The columns, in order: the row's key and date, then the counters.
const COLUMNS: [&str; 7] = [
    "key",
    "date",
    "requests",
    "questions",
    "input_tokens",
    "cached_tokens",
    "upstream_requests",
];

/// Runs the command: fetches and prints.
pub fn run_command(args: &UsageArgs) -> Result<(), String> {
    let body = super::runtime()?.block_on(fetch(args))?;
    print!("{}", render(&body, args.format)?);
    Ok(())
}

/// `GET {url}/v1/usage` with the arguments as the query; the service's error message when
/// it refuses.
pub async fn fetch(args: &UsageArgs) -> Result<Value, String> {
    let mut query: Vec<(&str, &str)> = Vec::new();
    for (name, value) in [("key", &args.key), ("from", &args.from), ("to", &args.to)] {
        if let Some(v) = value {
            query.push((name, v));
        }
    }
    let url = format!("{}/v1/usage", args.url.trim_end_matches('/'));
    let mut request = reqwest::Client::new().get(&url).query(&query);
    if let Some(key) = &args.api_key {
        request = request.bearer_auth(key.expose());
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("usage: cannot reach {url} (--url): {e}"))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("usage: {url} answered {status} without JSON: {e}"))?;
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("no message");
        return Err(format!("usage: the service answered {status}: {message}"));
    }
    Ok(body)
}

/// The rows of a `/v1/usage` body and a total line, as a table or CSV.
pub fn render(body: &Value, format: UsageFormat) -> Result<String, String> {
    let rows = body["usage"]
        .as_array()
        .ok_or("usage: the answer has no `usage` list")?;
    let cell = |row: &Value, column: &str| match &row[column] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut lines: Vec<Vec<String>> = vec![COLUMNS.iter().map(|c| c.to_string()).collect()];
    lines.extend(
        rows.iter()
            .map(|row| COLUMNS.iter().map(|c| cell(row, c)).collect()),
    );
    let mut total = vec!["total".to_string(), String::new()];
    total.extend(COLUMNS[2..].iter().map(|c| cell(&body["total"], c)));
    Ok(match format {
        UsageFormat::Csv => lines.iter().map(|l| format!("{}\n", l.join(","))).collect(),
        UsageFormat::Table => {
            lines.push(total);
            table(&lines)
        }
    })
}

/// Columns padded to their widest cell; numbers right-aligned.
fn table(lines: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i < 2 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_render_as_a_table_with_a_total_or_as_csv() {
        let body = serde_json::json!({
            "usage": [
                {"key": "acme", "date": "2026-12-01", "requests": 2, "questions": 5,
                 "input_tokens": 1234, "cached_tokens": 0, "upstream_requests": 5},
                {"key": "ci", "date": "2026-12-01", "requests": 1, "questions": 1,
                 "input_tokens": 7, "cached_tokens": 3, "upstream_requests": 1}
            ],
            "total": {"requests": 3, "questions": 6, "input_tokens": 1241,
                      "cached_tokens": 3, "upstream_requests": 6}
        });
        let csv = render(&body, UsageFormat::Csv).expect("renders");
        assert_eq!(
            csv,
            "key,date,requests,questions,input_tokens,cached_tokens,upstream_requests\n\
             acme,2026-12-01,2,5,1234,0,5\nci,2026-12-01,1,1,7,3,1\n"
        );
        let table = render(&body, UsageFormat::Table).expect("renders");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].starts_with("acme   2026-12-01"), "{table}");
        assert!(lines[3].starts_with("total"), "{table}");
        assert!(lines[3].ends_with("6"), "{table}");
        assert!(render(&serde_json::json!({}), UsageFormat::Csv).is_err());
    }
}
