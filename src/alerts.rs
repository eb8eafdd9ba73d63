//! Spending alerts: a webhook learns when a scope's spent + reserved first
//! reaches one of its thresholds (`alert_at`, fractions of the cap) in a
//! period, and when a scope first refuses a call (`exhausted`).
//!
//! Three steps, none of them on a call's path:
//! - `detect` turns a reserve's answer into events, synchronously and
//!   without I/O: each event's id is derived from the crossing itself
//!   (scope, period, type, threshold), so every gateway and every retry
//!   name it alike.
//! - [`Alerts`] queues new events in the store from a spawned task: a
//!   small in-process set of the ids already queued keeps each gateway to
//!   one store call per event in the common case, and the store drops
//!   the rest by id, so each event is queued once (`budget::alerts`).
//! - `deliver` is a background task per gateway that POSTs what is due,
//!   signed, and retries with backoff until the receiver answers 2xx: at
//!   least once, with a stable id for the receiver to drop duplicates by.
//!
//! Without `[alerts] webhook_url`, nothing is detected or queued.

pub mod deliver;
mod detect;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::Utc;

use crate::budget::alerts::AlertEvent;
use crate::budget::{AlertQueue, BudgetStore, Meter, ReserveOutcome, ReserveRequest, StoreError};
use crate::config::{Config, KeyConfig};
use crate::directory::Directory;
use crate::metrics::Metrics;

/// How many queued ids a gateway remembers before it starts afresh: a
/// forgotten id costs one more store call, which the store answers
/// "already queued".
const SEEN_LIMIT: usize = 10_000;

/// The alerting side of a gateway: off without a webhook.
pub struct Alerts {
    on: Option<Arc<Queueing>>,
}

struct Queueing {
    store: BudgetStore,
    metrics: Arc<Metrics>,
    /// Ids this gateway queued or is queueing. A `std` mutex: held for a
    /// set lookup, never across an `.await`.
    seen: Mutex<HashSet<String>>,
}

impl Alerts {
    pub fn new(config: &Config, store: BudgetStore, metrics: Arc<Metrics>) -> Alerts {
        let on = config.alerts.webhook.as_ref().map(|_| {
            Arc::new(Queueing {
                store,
                metrics,
                seen: Mutex::new(HashSet::new()),
            })
        });
        Alerts { on }
    }

    /// Looks at a reserve's answer for the call of `key`, and queues, in
    /// the background, the events it shows that this gateway has not
    /// queued yet. Never waits for the store.
    pub fn after_reserve(
        &self,
        directory: &Directory,
        key: &KeyConfig,
        request: &ReserveRequest,
        outcome: &Result<ReserveOutcome, StoreError>,
    ) {
        let (Some(queueing), Ok(outcome)) = (&self.on, outcome) else {
            return;
        };
        let events = match outcome {
            ReserveOutcome::Reserved { levels, .. } if !levels.is_empty() => {
                let org = key
                    .org
                    .as_deref()
                    .and_then(|org| directory.snapshot().orgs.get(org).cloned());
                let org_alert_at = org.as_ref().map_or(&[][..], |org| &org.config.alert_at[..]);
                detect::thresholds(request, &key.alert_at, org_alert_at, levels, Utc::now())
            }
            // A rate limit is transient: its refusal exhausts no budget.
            ReserveOutcome::Denied(denial) if denial.meter == Meter::Usd => {
                vec![detect::exhausted(denial, Utc::now())]
            }
            _ => return,
        };
        for event in events {
            queueing.queue(event);
        }
    }
}

impl Queueing {
    fn queue(self: &Arc<Self>, event: AlertEvent) {
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if seen.contains(&event.id) {
                return;
            }
            if seen.len() >= SEEN_LIMIT {
                seen.clear();
            }
            seen.insert(event.id.clone());
        }
        let queueing = self.clone();
        tokio::spawn(async move {
            match queueing.store.queue_alert(&event).await {
                Ok(true) => {
                    tracing::info!(id = %event.id, scope = %event.scope, scope_id = %event.scope_id,
                        r#type = event.kind.as_str(), "spending alert queued");
                    queueing
                        .metrics
                        .count_alert_queued(event.scope, event.kind.as_str());
                }
                Ok(false) => {}
                Err(error) => {
                    // Forgotten, so the next call that sees the crossing
                    // tries again.
                    queueing
                        .seen
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&event.id);
                    tracing::warn!(id = %event.id, %error, "cannot queue a spending alert");
                }
            }
        });
    }
}
