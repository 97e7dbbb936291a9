//! The engine's bookkeeping of the paged cache's blocks: which are free and how many sequences
//! list each (a shared prompt prefix is one set of blocks listed by every sequence that starts
//! with it). The pool grows, doubling, up to the budget's blocks as blocks are taken, so memory
//! follows the tokens held.

use crate::qwen3::PagedCache;

#[derive(Debug)]
pub(super) struct Blocks {
    refs: Vec<u32>,
    free: Vec<u32>,
    used: usize,
    limit: usize,
}

/// Blocks a pool starts with.
const FIRST_BLOCKS: usize = 16;

impl Blocks {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            refs: vec![],
            free: vec![],
            used: 0,
            limit,
        }
    }

    /// Blocks listed by at least one sequence.
    pub(super) fn used(&self) -> usize {
        self.used
    }

    /// Most blocks the budget allows.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// A free block, listed once; None when the budget's blocks are all in use.
    pub(super) fn take(&mut self, cache: &mut PagedCache) -> Option<u32> {
        if self.free.is_empty() {
            let have = cache.blocks();
            let want = (have * 2).max(FIRST_BLOCKS).min(self.limit);
            if want <= have {
                return None;
            }
            cache.grow(want);
            self.refs.resize(want, 0);
            // Lowest first, so a small run stays at the pool's start.
            self.free.extend((have..want).rev().map(|b| b as u32));
        }
        let b = self.free.pop()?;
        self.refs[b as usize] = 1;
        self.used += 1;
        Some(b)
    }

    /// One more sequence lists `b`.
    pub(super) fn share(&mut self, b: u32) {
        if let Some(r) = self.refs.get_mut(b as usize) {
            *r += 1;
        }
    }

    /// One sequence fewer lists `b`; it is free when none does.
    pub(super) fn release(&mut self, b: u32) {
        if let Some(r) = self.refs.get_mut(b as usize)
            && *r > 0
        {
            *r -= 1;
            if *r == 0 {
                self.free.push(b);
                self.used -= 1;
            }
        }
    }

    /// Whether more than one sequence lists `b` (so none may write into it).
    pub(super) fn shared(&self, b: u32) -> bool {
        self.refs.get(b as usize).is_some_and(|&r| r > 1)
    }
}
