//! The memory store's queue of spending alerts (see `budget::alerts`):
//! two maps behind their own lock, apart from the books, so queueing an
//! alert never waits for a call's reserve.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{later, to_delta, MemoryStore};
use crate::budget::alerts::{AlertEvent, QueuedAlert, ALERT_ID_RETENTION};

/// Events waiting for delivery, and the ids of those delivered.
#[derive(Default)]
pub(super) struct Queue {
    waiting: HashMap<String, Waiting>,
    /// Delivered ids, by when each may be forgotten.
    delivered: HashMap<String, DateTime<Utc>>,
}

struct Waiting {
    body: String,
    attempts: u32,
    due: DateTime<Utc>,
}

impl MemoryStore {
    /// Queues `event` unless its id was ever queued (within
    /// [`ALERT_ID_RETENTION`]); returns whether it did.
    pub fn queue_alert(&self, event: &AlertEvent) -> bool {
        let now = self.shared.now();
        let mut queue = self.shared.alerts();
        queue.delivered.retain(|_, forget_at| *forget_at > now);
        if queue.waiting.contains_key(&event.id) || queue.delivered.contains_key(&event.id) {
            return false;
        }
        queue.waiting.insert(
            event.id.clone(),
            Waiting {
                body: event.body(),
                attempts: 0,
                due: now,
            },
        );
        true
    }

    /// Up to `limit` events due now, oldest due first, each leased for
    /// `lease` (not due again before then).
    pub fn due_alerts(&self, limit: usize, lease: Duration) -> Vec<QueuedAlert> {
        let now = self.shared.now();
        let mut queue = self.shared.alerts();
        let mut due: Vec<(&String, &mut Waiting)> = queue
            .waiting
            .iter_mut()
            .filter(|(_, waiting)| waiting.due <= now)
            .collect();
        due.sort_by(|a, b| (a.1.due, a.0).cmp(&(b.1.due, b.0)));
        due.into_iter()
            .take(limit)
            .map(|(id, waiting)| {
                waiting.due = later(now, to_delta(lease));
                QueuedAlert {
                    id: id.clone(),
                    body: waiting.body.clone(),
                    attempts: waiting.attempts,
                }
            })
            .collect()
    }

    /// The receiver took the event: it is never sent again, and its id is
    /// remembered for [`ALERT_ID_RETENTION`].
    pub fn alert_delivered(&self, id: &str) {
        let now = self.shared.now();
        let mut queue = self.shared.alerts();
        queue.waiting.remove(id);
        queue
            .delivered
            .insert(id.to_owned(), later(now, to_delta(ALERT_ID_RETENTION)));
    }

    /// A delivery failed: the event is due again `retry_after` from now.
    pub fn alert_failed(&self, id: &str, retry_after: Duration) {
        let now = self.shared.now();
        if let Some(waiting) = self.shared.alerts().waiting.get_mut(id) {
            waiting.attempts = waiting.attempts.saturating_add(1);
            waiting.due = later(now, to_delta(retry_after));
        }
    }
}
