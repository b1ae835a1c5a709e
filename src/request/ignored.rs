//! What a body held that no rule reads, for the response header that names it.

/// The top-level fields of a body that no rule reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ignored {
    /// Their names, where a response header can repeat them as they are.
    pub names: Vec<String>,
    /// How many there were, listed or not.
    pub count: usize,
}
