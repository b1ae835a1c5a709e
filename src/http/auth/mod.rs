//! API keys: who may call, and how much.
//!
//! Keys come from a TOML file (`--keys-file`) and/or `SYSTEMONE_API_KEYS` (comma-separated
//! plaintext keys, named `key-1`, `key-2`, … in order). Only their sha256 digests are kept;
//! a presented bearer is hashed and compared against every configured digest in constant
//! time (`subtle`), so neither the match nor its position shows in the timing. With no key
//! configured the service is open: any bearer value, or none, is accepted (the TypeSafe
//! SDKs refuse to start without some key, so callers always send one).
//!
//! ```toml
//! [[key]]
//! name = "acme"                 # for logs and metrics; the key itself is never printed
//! sha256 = "9f86d0…"            # hex digest of the key …
//! requests_per_minute = 600     # optional, all three
//! questions_per_minute = 6000
//! daily_questions = 1000000
//!
//! [[key]]
//! name = "ci"
//! key_env = "CI_SYSTEMONE_KEY"  # … or the env variable holding the plaintext key
//! ```
//!
//! Each key may carry limits: requests and questions per minute (GCRA; a 429
//! `system_one_rate_limited` with `Retry-After` from the GCRA wait, capped at 60 s) and a
//! cap on questions per UTC day (a 429 `system_one_daily_cap` whose `Retry-After` runs to
//! the next UTC midnight, so a client does not retry before the cap resets). Requests are
//! counted when the key is checked, before the body is read; questions after validation,
//! before any upstream call. Where they are counted (this process, a `redb` file, or a
//! Redis every replica shares) is [`crate::quota`]'s business; this folder knows keys by
//! digest and hands the store their configured names only.
//!
//! The same file may hold `[[tier]]`s ([`tier`]: limits, models and routes a key or token
//! names), a `[jwt]` section ([`jwt`]: signed tokens beside the keys) and each key's
//! `tier` and `scopes` ([`scope`]). A bearer with a JWT's shape goes to token verification
//! when `[jwt]` is configured, anything else to the keys. A token caller is named by a hash
//! of its issuer and subject (`sub-<32 hex>`), or by the configured name claim's value
//! tagged with its issuer (`<value>@<8 hex>`), forms no key's name can take ([`names`]);
//! its limits, usage and ledger records use that name. Metrics label it `token` (or
//! `token:<tier>`), a bounded set, never per subject.
//!
//! Where the parts live: [`keys_file`] reads the configuration into [`Keys`]; [`keys`]
//! matches a bearer to a caller, [`identity`] is who it is; [`caller`] is what the routes ask of a [`Caller`] (names,
//! tier, scopes, limits) and the extractor; [`refusal`] turns each refusal into its
//! contract error.

mod caller;
mod identity;
mod jwks;
pub mod jwt;
mod keys;
mod keys_file;
pub mod names;
mod refusal;
pub mod salt;
pub mod scope;
mod subjects;
pub mod tier;

pub(crate) use caller::count_rejection;
pub use caller::CallerChecks;
pub use identity::Caller;
use identity::Identity;
pub use jwks::JwksStatus;
pub use keys::{digest, Keys};
use keys::{words, ApiKey};
pub use refusal::AuthError;
use tier::limits_of;

/// The name logs and metrics use for callers of an open service (no keys configured).
pub const ANONYMOUS: &str = "anonymous";
