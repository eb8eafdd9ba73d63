//! The periodic sweep: every tick, reservations past their deadline are
//! expired (charged their amount, or released under `on_expiry =
//! "release"`), so no hold outlives its deadline even when no call
//! arrives, and each expiry is counted in the metrics. On Redis a tick
//! visits a bounded share of the tags the store knows, in turn.
//!
//! On Redis each tick also reads the store's `tg:meta` first (see
//! `budget::redis`), so a gateway whose store epoch vanished fails closed,
//! and one whose operator accepted a new epoch serves again, without
//! waiting for a call.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::budget::{BudgetStore, SweeperGuard, Upkeep};
use crate::metrics::{Metrics, StoreOp};

/// A zero interval would make the sweep task spin.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(1);

/// Starts the sweep on the current Tokio runtime, every `every`; it stops
/// when the guard drops.
pub fn spawn(store: BudgetStore, metrics: Arc<Metrics>, every: Duration) -> SweeperGuard {
    let task = tokio::spawn(sweep_periodically(
        store,
        metrics,
        every.max(MIN_SWEEP_INTERVAL),
    ));
    SweeperGuard::new(task.abort_handle())
}

async fn sweep_periodically(store: BudgetStore, metrics: Arc<Metrics>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Logged when the sweep starts failing and when it recovers, not on
    // every tick while the store is down.
    let mut failing = false;
    loop {
        ticks.tick().await;
        match metrics.time(StoreOp::Sweep, store.sweep()).await {
            Ok(expired) => {
                metrics.count_expired(expired);
                if failing {
                    failing = false;
                    tracing::info!("budget sweep works again");
                }
            }
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "budget sweep failed");
            }
            Err(_) => {}
        }
    }
}
