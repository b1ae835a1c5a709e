//! How a model's prompts are shaped: the layout and the labels of long questions.

use clap::ValueEnum;
use serde::Deserialize;

/// The prompt layout (`docs/layouts.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Each request leads with its own question: best accuracy.
    #[default]
    Accuracy,
    /// Every request leads with all questions, so the backend's prefix cache is shared.
    Cost,
    /// The project's own bytes, not the reference's: one short instruction line and the
    /// state as the shared head, then the question as plain numbered lines (no JSON
    /// framing). Fewest prompt tokens; its own calibration.
    Compact,
}

impl Layout {
    /// The wire name (`"accuracy"`, `"cost"`, `"compact"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Accuracy => "accuracy",
            Layout::Cost => "cost",
            Layout::Compact => "compact",
        }
    }
}

/// Which labels a model asks with once a question has more options than its single-token
/// labels (`docs/token-tables.md`; a question that fits them is asked with them, byte for byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LabelScheme {
    /// Fixed-width numerals (`00`…`99`, `000`…`254`), scored by the chain rule: the prompt
    /// numbers the options as the reference does.
    #[default]
    Numerals,
    /// Single letters (`A`…`Z`, `a`…`z`) for up to 52 options, one read each order; numerals
    /// beyond. Needs a table built with `tokens build --letters`.
    Letters,
}
