//! Callers' names, in three forms that cannot meet: a key's configured name
//! (`A-Z a-z 0-9 - _ .`, never `sub-<32 hex>`), a token subject's `sub-<32 hex>` and a name
//! claim's `<value>@<8 hex>`.
//!
//! A name is what limits, usage, the ledger and the cache salt know a caller by, so one
//! caller that could take another's name would read its records and spend its quota. A
//! token's claims are the identity provider's to write, and through self-service client
//! registration often its users': a `client_id` may be anything, another subject's
//! `sub-…` name or a key's name included. The forms keep the name spaces apart whatever a
//! claim says: only a name claim's name holds `@`, which no key name may, and a key may
//! not be named like a subject. The `@` tag is the issuer's, so the same `client_id` at
//! two configured identity providers is two callers, as the same `sub` is.

use sha2::{Digest, Sha256};

use super::ANONYMOUS;

/// Hex digits of sha256(issuer) in a name claim's name.
const ISSUER_TAG_HEX: usize = 8;

/// A verified token's issuer and identity claim: never empty, so two issuers' subjects
/// never hash alike through an issuer that was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    issuer: String,
    identity: String,
}

impl Subject {
    /// The subject of `identity` at `issuer`; `None` when either is empty.
    pub fn new(issuer: &str, identity: &str) -> Option<Self> {
        (!issuer.is_empty() && !identity.is_empty()).then(|| Subject {
            issuer: issuer.to_owned(),
            identity: identity.to_owned(),
        })
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }
}

/// A name that is safe as a metrics label and log field: what a key's and a tier's name
/// must be, and what a name claim's value must be to be used.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != ANONYMOUS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether a key may be named `name`: a valid name not in a token caller's form.
pub fn valid_key_name(name: &str) -> bool {
    valid_name(name) && !is_subject_name(name)
}

/// A token caller's name: `sub-` and 32 hex digits of sha256(issuer, 0, identity). Stable
/// across restarts and replicas (usage and the ledger are kept by it), and not the subject.
pub fn subject_name(subject: &Subject) -> String {
    let mut hash = Sha256::new();
    hash.update(subject.issuer.as_bytes());
    hash.update([0u8]);
    hash.update(subject.identity.as_bytes());
    format!("sub-{}", hex(&hash.finalize()[..16]))
}

/// A name claim's name: its value, `@` and the issuer's tag ([`issuer_tag`]); `None` when
/// the value is not a [`valid_name`] (the caller is then named by its subject).
pub fn claim_name(issuer: &str, value: &str) -> Option<String> {
    valid_name(value).then(|| format!("{value}@{}", issuer_tag(issuer)))
}

/// The first 8 hex digits of sha256(issuer): `printf %s "$ISSUER" | sha256sum | cut -c1-8`.
pub fn issuer_tag(issuer: &str) -> String {
    hex(&Sha256::digest(issuer.as_bytes()))[..ISSUER_TAG_HEX].to_owned()
}

/// Whether `name` has a token caller's form: `sub-<32 hex>` or `<valid name>@<8 hex>`.
pub fn is_token_name(name: &str) -> bool {
    is_subject_name(name)
        || name.rsplit_once('@').is_some_and(|(value, tag)| {
            valid_name(value) && tag.len() == ISSUER_TAG_HEX && is_lower_hex(tag)
        })
}

/// Whether `name` is in [`subject_name`]'s form.
fn is_subject_name(name: &str) -> bool {
    name.strip_prefix("sub-")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDP_A: &str = "https://idp-a.test/";
    const IDP_B: &str = "https://idp-b.test/";

    #[test]
    fn a_subject_needs_an_issuer_and_an_identity() {
        assert!(Subject::new("", "alice").is_none());
        assert!(Subject::new(IDP_A, "").is_none());
        let a = Subject::new(IDP_A, "alice").expect("subject");
        let b = Subject::new(IDP_B, "alice").expect("subject");
        assert_ne!(subject_name(&a), subject_name(&b), "one name per issuer");
        assert!(is_token_name(&subject_name(&a)));
    }

    /// Whatever a name claim says (another subject's name, a key's name, a name with its
    /// own `@` tag), its name is neither a subject's nor one a key may have.
    #[test]
    fn a_name_claim_never_takes_a_subjects_or_a_keys_name() {
        let alice = subject_name(&Subject::new(IDP_A, "alice").expect("subject"));
        let tagged = claim_name(IDP_A, "ci").expect("valid");
        for value in [
            alice.as_str(),
            "acme",
            "key-1",
            "admin",
            tagged.as_str(),
            "ci",
        ] {
            let Some(name) = claim_name(IDP_A, value) else {
                assert!(value.contains('@'), "{value} refused");
                continue;
            };
            assert_ne!(name, alice, "{value}");
            assert_ne!(name, value, "{value}");
            assert!(!valid_key_name(&name), "{name} could be a key's name");
            assert!(is_token_name(&name), "{name}");
        }
        assert!(
            !valid_key_name(&alice),
            "a key may not be named like a subject"
        );
        assert!(valid_key_name("acme"));
        assert_ne!(claim_name(IDP_A, "ci"), claim_name(IDP_B, "ci"));
        assert_eq!(claim_name(IDP_A, "a b"), None);
        assert_eq!(claim_name(IDP_A, &"x".repeat(65)), None);
    }

    #[test]
    fn the_issuer_tag_is_documented_as_computed() {
        // printf %s https://idp-a.test/ | sha256sum | cut -c1-8
        assert_eq!(issuer_tag(IDP_A), "2fed9d0a");
        assert_eq!(claim_name(IDP_A, "ci").as_deref(), Some("ci@2fed9d0a"));
        assert!(!is_token_name("ci@ABCDEF12"));
        assert!(!is_token_name("c i@abcdef12"));
        assert!(is_token_name("ci@abcdef12"));
    }
}
