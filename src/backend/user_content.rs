//! The user message of a read: its content (a string, or text and image parts) and that
//! content encoded once ([`EncodedContent`]), which every read of it splices into its body.

use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// One part of a list-valued user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// `{"type":"text","text":…}`
    Text(String),
    /// `{"type":"image_url","image_url":{"url":…}}`; shared, as every request of a call
    /// carries the same images.
    ImageUrl(Arc<str>),
}

/// The user message content: a plain string, or parts (history, images).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserContent {
    Text(String),
    Parts(Vec<Part>),
}

impl UserContent {
    /// The text the model reads (the text parts joined), images left out.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            UserContent::Text(t) => t.as_str().into(),
            UserContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t.as_str()),
                    Part::ImageUrl(_) => None,
                })
                .collect::<String>()
                .into(),
        }
    }

    /// Total bytes of text, for token estimates.
    pub fn text_len(&self) -> usize {
        match self {
            UserContent::Text(t) => t.len(),
            UserContent::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Text(t) => t.len(),
                    Part::ImageUrl(_) => 0,
                })
                .sum(),
        }
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        match self {
            Part::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Part::ImageUrl(url) => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", &ImageUrl { url })?;
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
}

impl Serialize for UserContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            UserContent::Text(t) => s.serialize_str(t),
            UserContent::Parts(parts) => {
                let mut seq = s.serialize_seq(Some(parts.len()))?;
                for p in parts {
                    seq.serialize_element(p)?;
                }
                seq.end()
            }
        }
    }
}

/// A user message with its JSON encoding, rendered once when the prompt is built: every
/// read of it (each slice of ids, each node of a label trie) splices these bytes into its
/// body (`chat::Messages::write_json`) instead of escaping the ~16 KB prompt again.
#[derive(Debug, Clone)]
pub struct EncodedContent {
    content: UserContent,
    /// serde_json's encoding of `content`: a string literal, or the array of parts.
    json: String,
}

impl EncodedContent {
    /// Encodes `content` with serde_json.
    pub fn new(content: UserContent) -> Self {
        // Only strings are serialised (no maps with non-string keys, no floats): cannot fail.
        let json = serde_json::to_string(&content).expect("strings serialise");
        EncodedContent { content, json }
    }

    /// A text and its JSON string literal, which the caller escaped piece by piece (with
    /// [`crate::json::write_escaped`], serde_json's bytes), so no piece is escaped twice.
    pub(crate) fn from_text(text: String, json: String) -> Self {
        debug_assert_eq!(
            serde_json::to_string(&text).ok().as_deref(),
            Some(json.as_str())
        );
        EncodedContent {
            content: UserContent::Text(text),
            json,
        }
    }

    /// The encoded bytes.
    pub fn json(&self) -> &str {
        &self.json
    }
}

impl std::ops::Deref for EncodedContent {
    type Target = UserContent;
    fn deref(&self) -> &UserContent {
        &self.content
    }
}
