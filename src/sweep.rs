//! The periodic sweep: every tick, reservations past their deadline are
//! expired under every tag the store knows (charged their amount, or released
//! under `on_expiry = "release"`), so no hold outlives its deadline even
//! when no call arrives, and each expiry is counted in the metrics.
//!
//! On Redis each tick also reads the store's `tg:meta` first (see
//! `budget::redis`), so a gateway whose store epoch vanished fails closed,
//! and one whose operator accepted a new epoch serves again, without
//! waiting for a call.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::budget::{BudgetStore, SweeperGuard};
use crate::metrics::{Metrics, StoreOp};

/// Tags one sweep visits. Each costs Redis a script call, so with more tags
/// than this they are swept in turn, this many per tick: a reserve expires
/// what is due in its own tag before it checks the caps, so only idle tags
/// wait longer, and the sweep's load on Redis stays bounded however many
/// keys the config holds.
const SWEEP_TAGS_PER_TICK: usize = 256;

/// A zero interval would make the sweep task spin.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(1);

/// Starts the sweep on the current Tokio runtime, every `every` over the
/// tags the store knows (those of the config's keys and of the keys the
/// admin API made, read afresh each tick); it stops when the guard drops.
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
    let mut next_tag = 0;
    loop {
        ticks.tick().await;
        let tags = store.tags();
        let batch = next_sweep_tags(&tags, &mut next_tag);
        match metrics.time(StoreOp::Sweep, store.sweep(batch)).await {
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

/// The tags the next sweep visits: up to [`SWEEP_TAGS_PER_TICK`] from
/// `*next`, which moves on past them and starts over at the end.
fn next_sweep_tags<'a>(tags: &'a [String], next: &mut usize) -> &'a [String] {
    if *next >= tags.len() {
        *next = 0;
    }
    let end = tags.len().min(*next + SWEEP_TAGS_PER_TICK);
    let batch = &tags[*next..end];
    *next = end;
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("tag-{i}")).collect()
    }

    #[test]
    fn many_tags_are_swept_in_turn() {
        let tags = tags(SWEEP_TAGS_PER_TICK * 2 + 1);
        let mut next = 0;
        let mut swept = Vec::new();
        for size in [SWEEP_TAGS_PER_TICK, SWEEP_TAGS_PER_TICK, 1] {
            let batch = next_sweep_tags(&tags, &mut next);
            assert_eq!(batch.len(), size);
            swept.extend_from_slice(batch);
        }
        assert_eq!(swept, tags);
        // Then the turn starts over.
        assert_eq!(
            next_sweep_tags(&tags, &mut next),
            &tags[..SWEEP_TAGS_PER_TICK]
        );
    }

    #[test]
    fn a_few_tags_are_all_swept_every_tick() {
        let tags = tags(3);
        let mut next = 0;
        for _ in 0..3 {
            assert_eq!(next_sweep_tags(&tags, &mut next), &tags[..]);
        }
        assert!(next_sweep_tags(&[], &mut next).is_empty());
    }
}
