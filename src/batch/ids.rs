//! The ids of files, batches and lines. A line's request id is derived from its batch and
//! position, never drawn: a line run again after a restart is the same request, so the
//! ledger (keyed by request id) keeps one record of it.

use sha2::{Digest, Sha256};

/// A new file's id, `file-<32 hex>`, as OpenAI's look.
pub fn new_file_id() -> String {
    format!("file-{}", uuid::Uuid::now_v7().simple())
}

/// A new batch's id, `batch_<32 hex>`.
pub fn new_batch_id() -> String {
    format!("batch_{}", uuid::Uuid::now_v7().simple())
}

/// The request id of line `index` of `batch`: `req_<32 hex>`, the same every time it runs.
pub fn line_request_id(batch: &str, index: i64) -> String {
    format!("req_{}", line_hash(batch, index))
}

/// The id of line `index`'s output line, `batch_req_<32 hex>`.
pub fn line_output_id(batch: &str, index: i64) -> String {
    format!("batch_req_{}", line_hash(batch, index))
}

fn line_hash(batch: &str, index: i64) -> String {
    let digest = Sha256::new()
        .chain_update(b"systemone batch line\0")
        .chain_update(batch.as_bytes())
        .chain_update(index.to_le_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_id_is_the_same_every_time_and_differs_by_line_and_batch() {
        let a = line_request_id("batch_1", 0);
        assert_eq!(a, line_request_id("batch_1", 0));
        assert_eq!(a.len(), 4 + 32);
        assert_ne!(a, line_request_id("batch_1", 1));
        assert_ne!(a, line_request_id("batch_2", 0));
        assert!(line_output_id("batch_1", 0).starts_with("batch_req_"));
    }
}
