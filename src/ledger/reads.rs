//! The ledger as the source of the position prior's evidence: every recorded question read
//! in two or more option orders, with its reads by position, oldest first (the order the
//! service learned them in), for `systemone calibrate prior` to fit the prior again.
//! Records hold no caller text here either: a type, an option count, a layout's name and
//! log-probabilities.

use super::query::Filter;
use super::record::{Decision, OrderedReads};
use super::store::{Store, StoreError};

/// Records read per page.
const PAGE: u32 = 1000;

/// One question read in several orders.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionReads {
    /// The configured model that served it.
    pub model: String,
    /// `choice`, `noul` or `score`.
    pub kind: String,
    /// The reads and the layout they were asked in.
    pub reads: OrderedReads,
}

/// Every question read in several orders of the records `filter` selects (its `after` and
/// `limit` are set here), oldest first.
pub async fn ordered(store: &Store, filter: &Filter) -> Result<Vec<QuestionReads>, StoreError> {
    let mut filter = Filter {
        limit: PAGE,
        after: None,
        ..filter.clone()
    };
    let mut found = Vec::new();
    loop {
        let page = store.decisions(&filter).await?;
        found.extend(page.iter().flat_map(reads_of));
        match page.last() {
            Some(last) if page.len() == PAGE as usize => {
                filter.after = Some((last.at_ms, last.request_id.clone()));
            }
            _ => break,
        }
    }
    // Pages come newest first.
    found.reverse();
    Ok(found)
}

/// A record's questions read in several orders, last question first (the page is newest
/// first; [`ordered`] reverses the whole). The model is the configured one that served the
/// request: the one whose prior learned them.
fn reads_of(d: &Decision) -> impl Iterator<Item = QuestionReads> + '_ {
    d.questions.iter().rev().filter_map(move |q| {
        Some(QuestionReads {
            model: d.model.clone()?,
            kind: q.kind.clone(),
            reads: q.reads.clone()?,
        })
    })
}
