//! Test control over the memory store's time: a clock that moves only when
//! told to, and a store that reads it. Compiled only into tests; the store
//! itself reads the wall clock.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{later, to_delta, MemoryStore, Rules, Shared};

/// A clock that moves only when told to, so expiry and period rollover can
/// be exercised without waiting.
pub(crate) struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub(crate) fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the clock forward, stopping at the end of chrono's calendar.
    pub(crate) fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = later(*now, to_delta(by));
    }
}

impl MemoryStore {
    /// A store whose every deadline and period id comes from `clock`.
    pub(crate) fn with_clock(rules: Rules, clock: Arc<ManualClock>) -> Self {
        MemoryStore {
            shared: Arc::new(Shared {
                clock: Some(clock),
                ..Shared::new(rules)
            }),
        }
    }
}
