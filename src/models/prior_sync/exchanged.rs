//! What a store's exchange gives back, and what it set aside as unreadable.

use super::Sums;

/// What one exchange gives back: the merged sums, and what the store held that could not
/// be served (set aside, so the shape learns afresh from every replica's next sums).
#[derive(Debug, Default, PartialEq)]
pub struct Exchanged {
    /// Every readable shape's merged sums.
    pub sums: Sums,
    /// What was set aside, and why.
    pub set_aside: Vec<SetAside>,
}

/// [`SetAside::reason`]: a field that is not a finite number.
pub const NOT_A_NUMBER: &str = "not_a_number";
/// [`SetAside::reason`]: sums no samples could make.
pub const IMPLAUSIBLE: &str = "implausible";
/// [`SetAside::reason`]: a store file that cannot be opened or read.
pub const UNREADABLE: &str = "unreadable";

/// Something the store held that could not be read, moved out of the way.
#[derive(Debug, Clone, PartialEq)]
pub struct SetAside {
    /// `not_a_number` (a field that is not a finite number), `implausible` (sums no
    /// samples could make) or `unreadable` (the whole file).
    pub reason: &'static str,
    /// The shape's label, or the file's name, and where it went.
    pub what: String,
}
