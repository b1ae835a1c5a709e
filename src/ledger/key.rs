//! The ledger key: the secret of every keyed hash the ledger stores (HMAC-SHA256), so that a
//! copy of the database cannot be searched by hashing guessed names or labels.
//!
//! `SYSTEMONE_LEDGER_KEY` when set; else, for the embedded ledger only, a random key made
//! once and kept in `ledger.key` beside the SQLite file (mode 0600), so hashes stay
//! comparable across restarts. Records carry the key's id (a hash of it), never the key.

use std::io::Write;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::secret::Secret;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a keyed hash kept (hex-encoded: twice as many characters): 128 bits, beyond
/// any collision among one deployment's names and labels.
const HASH_BYTES: usize = 16;

/// The file beside the embedded ledger that keeps a generated key.
pub const KEY_FILE: &str = "ledger.key";

/// The ledger's HMAC key.
#[derive(Clone)]
pub struct LedgerKey {
    id: String,
    /// The HMAC with the key already absorbed (the only copy of the key kept; `Debug`
    /// shows the id alone): each hash starts from a copy of it instead of hashing the key's
    /// inner and outer pads again (two of a short hash's ~four SHA-256 blocks).
    keyed: HmacSha256,
}

impl std::fmt::Debug for LedgerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LedgerKey({})", self.id)
    }
}

/// What domain a keyed hash belongs to: the same text hashes differently as a question
/// name, an option label and a body, so one cannot be matched against another.
#[derive(Debug, Clone, Copy)]
pub enum Domain {
    Name,
    Label,
    Body,
}

impl Domain {
    fn tag(self) -> &'static [u8] {
        match self {
            Domain::Name => b"name\0",
            Domain::Label => b"label\0",
            Domain::Body => b"body\0",
        }
    }
}

impl LedgerKey {
    /// A key from its secret text.
    pub fn new(secret: Secret) -> Result<Self, String> {
        if secret.expose().len() < 16 {
            return Err(format!(
                "SYSTEMONE_LEDGER_KEY is {} bytes; at least 16 are needed",
                secret.expose().len()
            ));
        }
        let id = hex(&Sha256::digest(secret.expose().as_bytes())[..8]);
        let keyed = HmacSha256::new_from_slice(secret.expose().as_bytes())
            .expect("HMAC takes a key of any length");
        Ok(LedgerKey { id, keyed })
    }

    /// The key in `dir/ledger.key`, made (random, 256 bits) and kept there when missing.
    pub fn load_or_make(dir: &Path) -> Result<Self, String> {
        let path = dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => return LedgerKey::new(Secret::new(text.trim())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "cannot read the ledger key {}: {e}",
                    path.display()
                ))
            }
        }
        let made = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        write_private(&path, &made)
            .map_err(|e| format!("cannot keep the ledger key in {}: {e}", path.display()))?;
        LedgerKey::new(Secret::new(made))
    }

    /// The key's id: the first 8 bytes of its SHA-256, in hex (which key hashed a record).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A MAC over `domain` and `text`, ready for more input.
    pub fn mac(&self, domain: Domain) -> KeyedHash {
        let mut mac = self.keyed.clone();
        mac.update(domain.tag());
        KeyedHash(mac)
    }

    /// The keyed hash of one text in `domain`, hex.
    pub fn hash(&self, domain: Domain, text: &str) -> String {
        let mut mac = self.mac(domain);
        mac.update(text.as_bytes());
        mac.finish()
    }
}

/// A keyed hash being fed.
pub struct KeyedHash(HmacSha256);

impl KeyedHash {
    /// Adds `bytes`, length-prefixed so that `("ab", "c")` and `("a", "bc")` differ.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    /// The hash, hex ([`HASH_BYTES`] bytes).
    pub fn finish(self) -> String {
        hex(&self.0.finalize().into_bytes()[..HASH_BYTES])
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Writes `text` to a new file only the owner can read (fails if the file exists: two
/// processes starting at once keep the first key).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> LedgerKey {
        LedgerKey::new(Secret::new(text)).expect("long enough")
    }

    /// Hashes never change across versions (records written before must still be found by
    /// name): fixed vectors from Python's `hmac` (`HMAC-SHA256(key, tag ‖ le64(len) ‖ text)`,
    /// first 16 bytes).
    #[test]
    fn hashes_match_fixed_vectors() {
        let k = key("0123456789abcdef-a");
        assert_eq!(
            k.hash(Domain::Name, "refund"),
            "aa7b38fb833dfb1a2f1a93302137a754"
        );
        let mut body = k.mac(Domain::Body);
        body.update(b"ab");
        body.update(b"c");
        assert_eq!(body.finish(), "a06738fa0280c74b5134e34bc4833628");
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }

    #[test]
    fn hashes_depend_on_the_key_and_the_domain() {
        let (a, b) = (key("0123456789abcdef-a"), key("0123456789abcdef-b"));
        assert_eq!(
            a.hash(Domain::Name, "refund"),
            a.hash(Domain::Name, "refund")
        );
        assert_ne!(
            a.hash(Domain::Name, "refund"),
            b.hash(Domain::Name, "refund")
        );
        assert_ne!(
            a.hash(Domain::Name, "refund"),
            a.hash(Domain::Label, "refund")
        );
        assert_eq!(a.hash(Domain::Name, "refund").len(), 2 * HASH_BYTES);
        assert!(!format!("{a:?}").contains("0123456789abcdef"));
        assert_ne!(a.id(), b.id());
    }

    #[test]
    fn a_short_key_is_refused_without_echoing_it() {
        let e = LedgerKey::new(Secret::new("short")).expect_err("too short");
        assert!(e.contains("5 bytes") && !e.contains("short"), "{e}");
    }

    #[test]
    fn a_made_key_is_kept_and_read_back() {
        let dir = std::env::temp_dir().join(format!("ledger-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let made = LedgerKey::load_or_make(&dir).expect("made");
        let again = LedgerKey::load_or_make(&dir).expect("read");
        assert_eq!(made.id(), again.id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(KEY_FILE))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
