//! The token table a model serves right now.
//!
//! A table named in the configuration is fixed for the life of the process. An automatic one
//! (`--token-table auto`) is empty until the model's upkeep has built it from the serving
//! tokenizer ([`super::live`]), and is rebuilt when a later check finds that the tokenizer
//! changed. A request takes the table once, when it is validated, and keeps that one: a
//! rebuild never changes the labels of a question already being read.

use std::sync::{Arc, RwLock};

use super::build::{BuildError, BuildOptions};
use super::live::{build_live, LiveBuildError};
use super::table::PREFIX;
use super::TokenTable;
use crate::backend::Backend;
use crate::config::LabelScheme;
use crate::in_flight::InFlight;

/// A model's table: fixed, or built from the backend.
#[derive(Debug)]
pub struct ServedTable {
    /// The table requests get (`None` until an automatic one is built).
    current: RwLock<Option<Arc<TokenTable>>>,
    /// How to build it, for an automatic table.
    auto: Option<AutoTable>,
}

/// What an automatic table is built as.
#[derive(Debug)]
struct AutoTable {
    /// The table's name (the model's public name).
    name: String,
    /// Where its tokens came from, as the table records it (`vllm gemma-3-270m`).
    tokenizer_name: String,
    /// The labels the model asks with.
    scheme: LabelScheme,
}

impl ServedTable {
    /// A table loaded from a file or shipped by name.
    pub fn fixed(table: TokenTable) -> Self {
        ServedTable {
            current: RwLock::new(Some(Arc::new(table))),
            auto: None,
        }
    }

    /// An automatic table, empty until [`Self::rebuild`] succeeds.
    pub fn auto(name: &str, tokenizer_name: &str, scheme: LabelScheme) -> Self {
        ServedTable {
            current: RwLock::new(None),
            auto: Some(AutoTable {
                name: name.to_string(),
                tokenizer_name: tokenizer_name.to_string(),
                scheme,
            }),
        }
    }

    /// The table now, if there is one.
    pub fn get(&self) -> Option<Arc<TokenTable>> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Whether the table is built from the backend (and rebuilt when the tokenizer changes).
    pub fn is_auto(&self) -> bool {
        self.auto.is_some()
    }

    /// Builds the automatic table from the backend's tokenizer with the rules of
    /// `systemone tokens build` and serves it from now on. A fixed table is left as it is.
    pub async fn rebuild(
        &self,
        backend: &dyn Backend,
        in_flight: &InFlight,
    ) -> Result<(), LiveBuildError> {
        let Some(auto) = &self.auto else {
            return Ok(());
        };
        let options = BuildOptions::default();
        let built = build_live(
            backend,
            in_flight,
            &auto.name,
            &auto.tokenizer_name,
            PREFIX,
            &options,
        )
        .await?
        .with_label_scheme(auto.scheme)
        .map_err(|reason| BuildError::Scheme {
            scheme: "letters".into(),
            reason,
        })?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::new(built));
        Ok(())
    }
}
