//! The recent window: a shape's last answers, however long they took to come. A calendar
//! window holds what its hour or day brought, so at a high rate a shift is diluted by the
//! thousands of answers before it, and at a low rate the hour never holds enough to judge;
//! the last few hundred answers judge a shift after the same number of answers at any rate
//! (docs/benchmarks/calibration-watch.md).
//!
//! Kept as a ring of [`BLOCKS`] blocks of [`BLOCK`] answers, each with its sums: an answer
//! adds to the newest block, and a full one hands over to the oldest, emptied in place
//! ([`Sums::clear`]); so the window is the last `(BLOCKS − 1)·BLOCK` to `BLOCKS·BLOCK`
//! answers, in constant work per answer and fixed memory.

use super::point::Point;
use super::sums::Sums;

/// Answers per block.
pub const BLOCK: u64 = 50;
/// Blocks in the ring: the window holds the last 250 to 300 answers.
pub const BLOCKS: usize = 6;

/// One block: its sums and the span of its answers' instants.
#[derive(Debug, Clone)]
struct Block {
    /// The earliest answer's instant and just after the latest's (Unix ms).
    from_ms: i64,
    until_ms: i64,
    sums: Sums,
}

impl Block {
    fn new(options: usize) -> Self {
        Block {
            from_ms: i64::MAX,
            until_ms: i64::MIN,
            sums: Sums::new(options),
        }
    }

    fn holds(&self, at_ms: i64) -> bool {
        (self.from_ms..self.until_ms).contains(&at_ms)
    }
}

/// A recent window's sums, its earliest answer's instant and just after its latest's.
pub(super) type Held = (Sums, i64, i64);

/// A shape's recent window.
#[derive(Debug, Clone)]
pub(super) struct Recent {
    /// At most [`BLOCKS`], in ring order.
    blocks: Vec<Block>,
    /// The block being filled.
    newest: usize,
}

impl Recent {
    pub(super) fn new() -> Self {
        Recent {
            blocks: Vec::with_capacity(BLOCKS),
            newest: 0,
        }
    }

    /// Adds an answer at `at_ms` to the newest block, first handing over to the next (the
    /// oldest, emptied) when the newest is full.
    pub(super) fn add(&mut self, point: &Point<'_>, at_ms: i64) {
        let full = self
            .blocks
            .get(self.newest)
            .is_none_or(|b| b.sums.answers >= BLOCK);
        if full {
            if self.blocks.len() < BLOCKS {
                self.blocks.push(Block::new(point.probabilities.len()));
                self.newest = self.blocks.len() - 1;
            } else {
                self.newest = (self.newest + 1) % BLOCKS;
                let block = &mut self.blocks[self.newest];
                block.sums.clear();
                (block.from_ms, block.until_ms) = (i64::MAX, i64::MIN);
            }
        }
        let block = &mut self.blocks[self.newest];
        block.from_ms = block.from_ms.min(at_ms);
        block.until_ms = block.until_ms.max(at_ms.saturating_add(1));
        block.sums.add_answer(point);
    }

    /// The sums of the block holding an answer at `at_ms`, for its outcome: the newest such
    /// block (answers come about in order, so blocks seldom overlap), `None` once the
    /// answer's block was refilled. A replaced outcome finds the same block, or none.
    pub(super) fn existing(&mut self, at_ms: i64) -> Option<&mut Sums> {
        let n = self.blocks.len();
        let newest = self.newest;
        (0..n)
            .map(|back| (newest + n - back) % n)
            .find(|i| self.blocks[*i].holds(at_ms))
            .map(|i| &mut self.blocks[i].sums)
    }

    /// The window's sums (every block's, merged) and its span: the earliest answer's
    /// instant and just after the latest's; `None` without answers.
    pub(super) fn sums(&self) -> Option<Held> {
        let mut blocks = self.blocks.iter().filter(|b| b.sums.answers > 0);
        let first = blocks.next()?;
        let (mut sums, mut from, mut until) = (first.sums.clone(), first.from_ms, first.until_ms);
        for b in blocks {
            sums.merge(&b.sums);
            from = from.min(b.from_ms);
            until = until.max(b.until_ms);
        }
        Some((sums, from, until))
    }
}
