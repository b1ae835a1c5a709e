//! [`Tier`]s: a named plan, configured once in the keys file and named by a key's entry
//! (`tier = "pro"`) or by a token's tier claim. A tier has the limits a key has (requests
//! and questions per minute, questions per UTC day) and, optionally, the models and routes
//! its callers may use; a caller refused one gets 403 `system_one_tier_model_refused` or
//! `system_one_tier_route_refused`, whose message names the tier and what it lacks.
//!
//! ```toml
//! [[tier]]
//! name = "free"
//! requests_per_minute = 60
//! questions_per_minute = 600
//! daily_questions = 10000
//! models = ["gemma-3-270m"]              # absent: every model
//! routes = ["/v1/systemone", "/v1/usage"]  # absent: every route; "/v1/ledger" covers its sub-routes
//! ```

use std::num::NonZeroU32;

use serde::Deserialize;

use crate::quota::KeyLimits;

/// One `[[tier]]` of the keys file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TierSpec {
    pub(super) name: String,
    pub(super) requests_per_minute: Option<u32>,
    pub(super) questions_per_minute: Option<u32>,
    pub(super) daily_questions: Option<u64>,
    pub(super) models: Option<Vec<String>>,
    pub(super) routes: Option<Vec<String>>,
}

/// A configured tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// Its name, as keys and token claims give it; in messages, never a secret.
    pub name: String,
    /// The limits of each of its callers (each counted on its own).
    pub limits: KeyLimits,
    /// The models (names or aliases) it may be served by; `None`: every model.
    pub models: Option<Vec<String>>,
    /// The routes it may call (a route or a prefix of routes); `None`: every route.
    pub routes: Option<Vec<String>>,
}

impl Tier {
    /// The tier of a spec, its limits checked as a key's are.
    pub(super) fn from_spec(spec: TierSpec) -> Result<Tier, String> {
        let limits = limits_of(
            spec.requests_per_minute,
            spec.questions_per_minute,
            spec.daily_questions,
        )?;
        if let Some(route) = spec
            .routes
            .iter()
            .flatten()
            .find(|r| !(r.starts_with("/v1/") || r.starts_with("/v2/")))
        {
            return Err(format!(
                "routes lists {route:?}; a route starts with /v1/ or /v2/ (e.g. \"/v1/systemone\")"
            ));
        }
        Ok(Tier {
            name: spec.name,
            limits,
            models: spec.models,
            routes: spec.routes,
        })
    }

    /// Whether the tier may be served by the model named `names` (its name and aliases).
    pub fn allows_model<'a>(&self, mut names: impl Iterator<Item = &'a str>) -> bool {
        match &self.models {
            None => true,
            Some(models) => names.any(|n| models.iter().any(|m| m == n)),
        }
    }

    /// Whether the tier may call `route` (the matched route, e.g. `/v1/ledger/decisions`).
    pub fn allows_route(&self, route: &str) -> bool {
        match &self.routes {
            None => true,
            Some(routes) => routes.iter().any(|r| {
                let r = r.trim_end_matches('/');
                route == r
                    || route
                        .strip_prefix(r)
                        .is_some_and(|rest| rest.starts_with('/'))
            }),
        }
    }
}

/// Limits from their configured numbers (each optional; 0 is refused, naming the field).
pub(super) fn limits_of(
    requests_per_minute: Option<u32>,
    questions_per_minute: Option<u32>,
    daily_questions: Option<u64>,
) -> Result<KeyLimits, String> {
    let per_minute = |n: Option<u32>, what: &str| -> Result<Option<NonZeroU32>, String> {
        n.map(|n| {
            NonZeroU32::new(n).ok_or(format!(
                "{what} must be at least 1 (leave it out for no limit)"
            ))
        })
        .transpose()
    };
    if daily_questions == Some(0) {
        return Err("daily_questions must be at least 1 (leave it out for no cap)".into());
    }
    Ok(KeyLimits {
        requests_per_minute: per_minute(requests_per_minute, "requests_per_minute")?,
        questions_per_minute: per_minute(questions_per_minute, "questions_per_minute")?,
        daily_questions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(models: Option<&[&str]>, routes: Option<&[&str]>) -> Tier {
        let own = |l: Option<&[&str]>| l.map(|l| l.iter().map(|s| s.to_string()).collect());
        Tier::from_spec(TierSpec {
            name: "free".into(),
            requests_per_minute: None,
            questions_per_minute: None,
            daily_questions: Some(5),
            models: own(models),
            routes: own(routes),
        })
        .expect("valid")
    }

    #[test]
    fn a_tier_allows_its_models_and_routes_only() {
        let t = tier(Some(&["small"]), Some(&["/v1/systemone", "/v1/ledger"]));
        assert!(t.allows_model(["big", "small"].into_iter()));
        assert!(!t.allows_model(["big"].into_iter()));
        assert!(t.allows_route("/v1/systemone"));
        assert!(t.allows_route("/v1/ledger/decisions/{request_id}"));
        assert!(!t.allows_route("/v1/ledgerx"));
        assert!(!t.allows_route("/v1/decisions"));
        let open = tier(None, None);
        assert!(open.allows_model(["any"].into_iter()) && open.allows_route("/v2/rerank"));
        assert_eq!(open.limits.daily_questions, Some(5));
    }

    #[test]
    fn a_route_must_look_like_one() {
        let spec = TierSpec {
            name: "t".into(),
            requests_per_minute: None,
            questions_per_minute: None,
            daily_questions: None,
            models: None,
            routes: Some(vec!["systemone".into()]),
        };
        let e = Tier::from_spec(spec).expect_err("refused");
        assert!(e.contains("\"systemone\""), "{e}");
    }
}
