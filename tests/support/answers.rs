//! Reading answers back: the numbers of one question's answer, in the order the request
//! listed its options.

use serde_json::Value;

/// The probabilities of one question's answer in option order: a choice's `probabilities`
/// object as written (the answer lists the options in request order), `[P(no), P(yes)]` for a
/// noul.
pub fn probabilities(answer: &Value) -> Vec<f64> {
    match answer["type"].as_str() {
        Some("noul") => {
            let yes = answer["noul"]
                .as_f64()
                .unwrap_or_else(|| panic!("noul: {answer}"));
            vec![1.0 - yes, yes]
        }
        _ => answer["probabilities"]
            .as_object()
            .unwrap_or_else(|| panic!("probabilities: {answer}"))
            .values()
            .map(|p| p.as_f64().unwrap_or_else(|| panic!("a number: {p}")))
            .collect(),
    }
}
