//! [`HeadKey`]: a hash of what every prompt of a request shares ahead of its tail, the key a
//! fleet of replicas routes by (`models::fleet`) and the routing key a router in front of
//! them reads (`backend::Routing`).
//!
//! The head is the model, the layout, the state, the images and a history shared by every
//! question: two requests with the same head find it in the same replica's prefix cache.
//! Per-question histories and the questions themselves are tails (in the `accuracy` layout
//! the asked question leads, but a state asked again with the same questions still lands
//! on the replica that holds each of its prompts). SHA-256, unkeyed: gateways that share no
//! secret agree on it, and it goes only to the backends, which see the text itself.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::History;
use crate::config::Layout;

/// The digest of a request's content that every prompt shares (state, images, a shared
/// history), computed once at validation, where a large body is on the blocking pool.
pub(in crate::request) fn content_digest(
    state_json: &str,
    images: &[Arc<str>],
    history: &History,
) -> [u8; 32] {
    let mut hash = Sha256::new();
    // Length-prefixed parts, so no two different requests feed the same bytes.
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    part(state_json.as_bytes());
    for image in images {
        part(image.as_bytes());
    }
    if let History::Shared(text) = history {
        part(text.as_bytes());
    }
    hash.finalize().into()
}

/// A request's routing key: 16 bytes of SHA-256 over the model's upstream id, the layout
/// and the content digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeadKey([u8; 16]);

impl HeadKey {
    /// The key of a request for `upstream_model` in `layout` with this content digest.
    pub(super) fn new(upstream_model: &str, layout: Layout, content: &[u8; 32]) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"systemone head v1\0");
        hash.update((upstream_model.len() as u64).to_le_bytes());
        hash.update(upstream_model.as_bytes());
        hash.update([match layout {
            Layout::Accuracy => 0u8,
            Layout::Cost => 1,
            Layout::Compact => 2,
        }]);
        hash.update(content);
        let digest = hash.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        HeadKey(key)
    }

    /// The first 8 bytes, for rendezvous hashing.
    pub fn as_u64(&self) -> u64 {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        u64::from_le_bytes(first)
    }

    /// 32 lowercase hex digits: the routing header's value (one allocation, made on every
    /// read path).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(state: &str, images: &[&str], history: History, layout: Layout) -> HeadKey {
        let images: Vec<Arc<str>> = images.iter().map(|i| Arc::from(*i)).collect();
        HeadKey::new("m", layout, &content_digest(state, &images, &history))
    }

    #[test]
    fn hex_is_every_byte_as_two_lowercase_digits_in_order() {
        let key = HeadKey([
            0x00, 0x01, 0x0f, 0x10, 0x7f, 0x80, 0xa5, 0xff, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc,
            0xde, 0xf0,
        ]);
        assert_eq!(key.hex(), "00010f107f80a5ff123456789abcdef0");
        let formatted: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(key.hex(), formatted);
    }

    #[test]
    fn the_key_follows_the_head_and_nothing_else() {
        let base = key("{\"a\": 1}", &[], History::None, Layout::Accuracy);
        assert_eq!(
            base,
            key("{\"a\": 1}", &[], History::None, Layout::Accuracy)
        );
        assert_eq!(base.hex().len(), 32);
        assert!(base.hex().bytes().all(|b| b.is_ascii_hexdigit()));
        let others = [
            key("{\"a\": 2}", &[], History::None, Layout::Accuracy),
            key(
                "{\"a\": 1}",
                &["data:image/png;base64,AA"],
                History::None,
                Layout::Accuracy,
            ),
            key(
                "{\"a\": 1}",
                &[],
                History::Shared("h".into()),
                Layout::Accuracy,
            ),
            key("{\"a\": 1}", &[], History::None, Layout::Cost),
            HeadKey::new(
                "other",
                Layout::Accuracy,
                &content_digest("{\"a\": 1}", &[], &History::None),
            ),
        ];
        for other in others {
            assert_ne!(base, other);
        }
        // A per-question history is a tail: the head is the same.
        let per_question = History::PerQuestion(vec![Some("x".into())]);
        assert_eq!(base, key("{\"a\": 1}", &[], per_question, Layout::Accuracy));
        // Parts are length-prefixed: moving bytes between state and image changes the key.
        assert_ne!(
            key("ab", &["c"], History::None, Layout::Accuracy),
            key("a", &["bc"], History::None, Layout::Accuracy)
        );
    }
}
