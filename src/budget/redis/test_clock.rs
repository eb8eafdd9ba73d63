//! Tests only: shifting the Redis store's clock, so the contract suite
//! crosses a period boundary or the ledger retention without waiting.
//!
//! The offset is the store's own (`Inner::clock_offset_ms`). A test build
//! passes it to every script that reads the time as one ARGV past those
//! the script's header states, and `lua/test/clock.lua`, compiled into
//! those scripts only in a test build, adds it to Redis's `TIME`. A
//! production build has neither the field nor the argument.

use std::sync::atomic::Ordering;

use super::{Inner, RedisStore};

impl RedisStore {
    /// Shifts the store's clock by `by_ms` (cumulative).
    pub(crate) fn shift_clock(&self, by_ms: i64) {
        self.inner
            .clock_offset_ms
            .fetch_add(by_ms, Ordering::Relaxed);
    }
}

impl Inner {
    /// How far the store's clock is shifted from Redis's.
    pub(super) fn clock_offset_ms(&self) -> i64 {
        self.clock_offset_ms.load(Ordering::Relaxed)
    }
}
