//! [`Routes`]: the registry as one request sees it, with which circuits refused requests
//! when it arrived, and the fallback walk that picks the model that serves it.

use std::sync::Arc;

use super::model::Model;
use super::registry::Models;
use crate::telemetry::TARGET;

impl Models {
    /// Which models' circuits refuse requests now: read once per request, by the front
    /// door, before validation, so that validation (pure) resolves the serving model from
    /// this snapshot and reads no clock. Only models with a fallback are looked at (no
    /// allocation without one); each refusing model whose fallback serves is logged.
    pub fn routes(&self) -> Routes<'_> {
        let refusing: Vec<bool> = if self.list.iter().any(|m| !m.fallback.is_empty()) {
            self.list
                .iter()
                .map(|m| m.circuit.check().is_err())
                .collect()
        } else {
            Vec::new()
        };
        let routes = Routes {
            models: self,
            refusing,
        };
        for m in self.list.iter().filter(|m| routes.refuses(m)) {
            let serving = routes.serving(m);
            if serving.name != m.name {
                tracing::info!(model = %m.name, fallback = %serving.name, "a model's circuit is open: its fallback serves its requests");
            }
        }
        routes
    }
}

/// The registry as one request sees it: every model, and which circuits refused requests
/// when the request arrived ([`Models::routes`]). Derefs to [`Models`].
#[derive(Debug)]
pub struct Routes<'m> {
    models: &'m Models,
    /// Per model, in configuration order; empty when no model has a fallback.
    refusing: Vec<bool>,
}

impl Routes<'_> {
    fn refuses(&self, model: &Model) -> bool {
        let index = self.models.by_name.get(&model.name);
        index.is_some_and(|i| self.refusing.get(*i).copied().unwrap_or(false))
    }

    /// The model that serves a request for `requested`: `requested` itself unless its
    /// circuit refuses requests; then the first of its fallbacks, in order, that serves
    /// (each one itself, or one of its own fallbacks, the same way), else `requested`
    /// (whose circuit then refuses the request). Resolved before the request is validated,
    /// so it is validated (option counts, token limits, images) against the model that will
    /// answer it. The registry refused loops at startup; `seen` guards the walk anyway.
    pub fn serving<'a>(&'a self, requested: &'a Arc<Model>) -> &'a Arc<Model> {
        let mut seen = Vec::new();
        let serving = self
            .first_serving(requested, &mut seen)
            .unwrap_or(requested);
        if !Arc::ptr_eq(serving, requested) {
            tracing::info!(
                target: TARGET,
                requested_model = %requested.name,
                model = %serving.name,
                "fallback"
            );
        }
        serving
    }

    /// `model` when its circuit admits, else the first of its fallbacks that serves.
    fn first_serving<'a>(
        &'a self,
        model: &'a Arc<Model>,
        seen: &mut Vec<&'a str>,
    ) -> Option<&'a Arc<Model>> {
        if seen.contains(&model.name.as_str()) {
            return None;
        }
        seen.push(&model.name);
        if !self.refuses(model) {
            return Some(model);
        }
        self.models
            .fallbacks_of(model)
            .find_map(|f| self.first_serving(f, seen))
    }
}

impl std::ops::Deref for Routes<'_> {
    type Target = Models;

    fn deref(&self) -> &Models {
        self.models
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::systemone::SystemOneBackend;
    use crate::config::CircuitSettings;
    use crate::models::circuit::Circuit;
    use crate::models::circuit::Health;
    use crate::models::tokens::TokenTable;
    use crate::models::DEFAULT_ALIAS;

    /// A model named `name` falling back to `fallback`, whose circuit opens on one failure.
    fn model(name: &str, fallback: &[&str]) -> Arc<Model> {
        let backend = SystemOneBackend::unreachable(name);
        let mut m = Model::new(name, Arc::new(backend), TokenTable::native(4));
        m.fallback = fallback.iter().map(|f| f.to_string()).collect();
        let settings = CircuitSettings {
            failure_rate: 50,
            min_calls: 1,
            ..CircuitSettings::default()
        };
        m.circuit = Circuit::new(name, settings);
        Arc::new(m)
    }

    fn open(m: &Model) {
        m.circuit.admit().expect("closed").record(Health::Failure);
        assert!(m.circuit.check().is_err(), "{} opened", m.name);
    }

    #[test]
    fn a_fallback_loop_is_refused_at_startup_with_its_path() {
        let cases: Vec<(Vec<Arc<Model>>, &str)> = vec![
            (
                vec![model("a", &["b"]), model("b", &["a"])],
                "fallback loop: a -> b -> a",
            ),
            (
                vec![
                    model("a", &["b", "c"]),
                    model("b", &[]),
                    model("c", &["d"]),
                    model("d", &["c"]),
                ],
                "fallback loop: c -> d -> c",
            ),
            (
                vec![model("a", &["a"])],
                "model a: fallback \"a\" is the model itself",
            ),
            (
                vec![model("a", &["zz"])],
                "model a: fallback \"zz\" is not a configured model",
            ),
        ];
        for (list, want) in cases {
            let err = Models::new(list, 0).expect_err(want).to_string();
            assert!(err.starts_with(want), "{want}: {err}");
        }
        let chain = vec![model("a", &["b", "c"]), model("b", &["c"]), model("c", &[])];
        assert!(Models::new(chain, 0).is_ok(), "a diamond is not a loop");
        let pinned = vec![model("jev", &[]), model("jev-1.13.0", &[DEFAULT_ALIAS])];
        let models = Models::new(pinned, 0).expect("a pinned model may fall back to the latest");
        let pinned = models.resolve("jev-1.13.0").expect("configured");
        let fallbacks: Vec<&str> = models
            .fallbacks_of(pinned)
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(fallbacks, ["jev"]);
        let latest_itself = vec![model("jev", &[DEFAULT_ALIAS])];
        let err = Models::new(latest_itself, 0)
            .expect_err("itself")
            .to_string();
        assert_eq!(
            err,
            "model jev: fallback \"jev-latest\" is the model itself"
        );
    }

    #[tokio::test]
    async fn the_chain_is_walked_in_order_depth_first_while_circuits_refuse() {
        let list = vec![
            model("a", &["b", "c"]),
            model("b", &["d"]),
            model("c", &[]),
            model("d", &[]),
        ];
        let models = Models::new(list, 0).expect("valid");
        let by = |n: &str| models.resolve(n).expect("configured").clone();
        let serving = |models: &Models| models.routes().serving(&by("a")).name.clone();
        assert_eq!(serving(&models), "a");
        open(&by("a"));
        assert_eq!(serving(&models), "b");
        open(&by("b"));
        assert_eq!(serving(&models), "d", "b's own fallback before a's next");
        open(&by("d"));
        assert_eq!(serving(&models), "c");
        open(&by("c"));
        assert_eq!(
            serving(&models),
            "a",
            "none serves: the requested model refuses"
        );
    }
}
