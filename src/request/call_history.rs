//! Where a history that grows across calls goes in the prompt, so that the prefix cache
//! keeps it.

/// A record that grows across calls, placed where the prefix cache keeps it (`docs/request.md`).
#[derive(Debug, Clone, PartialEq)]
pub enum History {
    /// No history: the plain layout.
    None,
    /// One history for every question; the lead is then the whole question block.
    Shared(String),
    /// A history per question (aligned with the questions); `None` keeps the plain layout.
    PerQuestion(Vec<Option<String>>),
}

impl History {
    /// Question `question`'s history, if any: the shared one, or its own.
    pub fn of(&self, question: usize) -> Option<&str> {
        match self {
            History::None => None,
            History::Shared(h) => Some(h.as_str()),
            History::PerQuestion(per) => per[question].as_deref(),
        }
    }
}
