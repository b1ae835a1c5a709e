//! An entry of a top-level object, and the `loc` of errors about it or its fields.

use super::refusal::loc;

/// An entry of a top-level object (`questions.<id>`, `assets.<key>`): the errors about the
/// entry point at it, and those about one of its fields one level deeper.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<'a> {
    pub(super) map: &'static str,
    pub(super) key: &'a str,
}

impl Entry<'_> {
    /// `[map, key]`: the entry as a whole.
    pub(super) fn whole(self) -> Vec<String> {
        loc(&[self.map, self.key])
    }

    /// `[map, key, field]`: one field of the entry.
    pub(super) fn field(self, field: &str) -> Vec<String> {
        loc(&[self.map, self.key, field])
    }
}
