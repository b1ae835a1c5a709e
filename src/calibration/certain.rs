//! The answer to a question with one option, which nothing needs to be asked for.

use super::Decoded;

/// The answer to a question with a single option: certain, without asking.
pub fn certain() -> Decoded {
    Decoded {
        probabilities: vec![1.0],
        option_mass: None,
        option_mass_unknown: false,
        temperature: 1.0,
        confidence: 1.0,
        profile: None,
        prior: None,
        orders: Vec::new(),
        passed: None,
        model: None,
    }
}
