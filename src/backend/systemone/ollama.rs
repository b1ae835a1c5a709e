//! Ollama's `/v1/systemone`: errors are `{"error": "…"}` bodies (never passed on: the
//! caller gets this service's message), images go as a list of raw base64 strings (no
//! data-URL head), `keep_alive` comes from this service's configuration only (a caller's is
//! never forwarded), and a question may have 2 to 26 options: a wider one is a 422 here,
//! before anything is sent (a 1-option question is answered without asking, as always).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::quirks::Quirks;

/// The most options Ollama's native route takes (its labels are the letters A–Z).
const MAX_OPTIONS: usize = 26;

/// The Ollama flavor.
#[derive(Debug)]
pub(super) struct Ollama {
    /// `keep_alive` sent with every request, when configured.
    pub keep_alive: Option<String>,
}

impl Quirks for Ollama {
    fn max_options(&self) -> usize {
        MAX_OPTIONS
    }

    fn images(&self, images: &[Arc<str>]) -> Value {
        Value::Array(images.iter().map(|i| Value::from(raw_base64(i))).collect())
    }

    fn add_fields(&self, body: &mut Map<String, Value>) {
        body.remove("keep_alive");
        if let Some(keep_alive) = &self.keep_alive {
            body.insert("keep_alive".into(), Value::from(keep_alive.as_str()));
        }
    }
}

/// The base64 payload of a data URL (`data:image/png;base64,AAAA` → `AAAA`); raw base64
/// as it is.
fn raw_base64(image: &str) -> &str {
    match image.strip_prefix("data:") {
        Some(rest) => rest.split_once(',').map_or(rest, |(_, data)| data),
        None => image,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_go_as_raw_base64_and_keep_alive_from_configuration() {
        let o = Ollama {
            keep_alive: Some("5m".into()),
        };
        let images: Vec<Arc<str>> = vec![
            Arc::from("data:image/png;base64,iVBOR"),
            Arc::from("/9j/4A"),
        ];
        assert_eq!(o.images(&images), serde_json::json!(["iVBOR", "/9j/4A"]));
        let mut body = Map::new();
        body.insert("keep_alive".into(), Value::from("caller's"));
        o.add_fields(&mut body);
        assert_eq!(body.get("keep_alive"), Some(&Value::from("5m")));
        let mut body = Map::new();
        Ollama { keep_alive: None }.add_fields(&mut body);
        assert!(body.is_empty());
    }
}
