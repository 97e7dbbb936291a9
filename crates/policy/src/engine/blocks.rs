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

    /// Allocates the whole budget at once. Growing copies the pool (old and new side by
    /// side: up to 1.5x the budget for a moment), which a device whose memory plan counts the
    /// budget exactly cannot afford; vLLM allocates its KV cache up front on a GPU too.
    pub(super) fn allocate_all(&mut self, cache: &mut PagedCache) {
        self.grow_to(cache, self.limit);
    }

    fn grow_to(&mut self, cache: &mut PagedCache, want: usize) {
        let have = cache.blocks();
        if want <= have {
            return;
        }
        cache.grow(want);
        self.refs.resize(want, 0);
        // Lowest first, so a small run stays at the pool's start.
        let mut fresh: Vec<u32> = (have..want).rev().map(|b| b as u32).collect();
        fresh.append(&mut self.free);
        self.free = fresh;
    }

    /// A free block, listed once; None when the budget's blocks are all in use.
    pub(super) fn take(&mut self, cache: &mut PagedCache) -> Option<u32> {
        if self.free.is_empty() {
            // Doubling up to the budget; at the budget nothing is added and none is free.
            let want = (cache.blocks() * 2).max(FIRST_BLOCKS).min(self.limit);
            self.grow_to(cache, want);
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
