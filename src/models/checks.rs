//! The startup checks of the graph models form: fallbacks and escalations name other
//! configured models, and no chain of fallbacks loops.

use std::collections::HashMap;
use std::sync::Arc;

use super::model::Model;
use crate::config::ConfigError;

/// Every fallback names a configured model other than its own, and no chain of fallbacks
/// comes back to a model it left: a loop is refused with its path (`a -> b -> a`).
pub(super) fn check_fallbacks(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
) -> Result<(), ConfigError> {
    for m in list {
        for fallback in &m.fallback {
            check_other_model(list, by_name, m, "fallback", fallback)?;
        }
    }
    for start in 0..list.len() {
        let mut path = vec![start];
        if let Some(cycle) = find_loop(list, by_name, &mut path) {
            let names: Vec<&str> = cycle.iter().map(|i| list[*i].name.as_str()).collect();
            return Err(ConfigError::Invalid(format!(
                "fallback loop: {} (a chain of fallbacks must end)",
                names.join(" -> ")
            )));
        }
    }
    Ok(())
}

/// Every `escalate_to` names a configured model other than its own (one hop: the
/// escalation model's own escalation is not followed, so no loop can form).
pub(super) fn check_escalations(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
) -> Result<(), ConfigError> {
    for m in list {
        if let Some(escalation) = &m.escalation {
            check_other_model(list, by_name, m, "escalate_to", &escalation.to)?;
        }
    }
    Ok(())
}

/// `target`, which `model`'s `key` names, is a configured model other than `model`.
fn check_other_model(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
    model: &Model,
    key: &str,
    target: &str,
) -> Result<(), ConfigError> {
    match by_name.get(target) {
        Some(i) if list[*i].name != model.name => Ok(()),
        Some(_) => Err(ConfigError::Invalid(format!(
            "model {}: {key} {target:?} is the model itself",
            model.name
        ))),
        None => Err(ConfigError::Invalid(format!(
            "model {}: {key} {target:?} is not a configured model",
            model.name
        ))),
    }
}

/// A loop reachable by fallbacks from the end of `path`, as the path that closes it.
fn find_loop(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
    path: &mut Vec<usize>,
) -> Option<Vec<usize>> {
    let at = *path.last()?;
    for next in list[at].fallback.iter().filter_map(|n| by_name.get(n)) {
        if let Some(from) = path.iter().position(|p| p == next) {
            let mut cycle = path[from..].to_vec();
            cycle.push(*next);
            return Some(cycle);
        }
        path.push(*next);
        if let Some(cycle) = find_loop(list, by_name, path) {
            return Some(cycle);
        }
        path.pop();
    }
    None
}
