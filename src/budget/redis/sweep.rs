//! The Redis store's upkeep: the periodic sweep, in bounded script calls
//! and in turn over the tags when there are many, and reachability.

use std::sync::PoisonError;

use super::connection::{CallPolicy, Request};
use super::scripts::{self, TagKeys};
use super::RedisStore;
use crate::budget::{tag_for, StoreError, Upkeep};

/// Work of each kind one sweep call does, so no call blocks Redis for long.
const SWEEP_BATCH: usize = 1_000;
/// Sweep calls per tag per sweep before the rest waits for the next tick.
const SWEEP_CALLS_PER_TAG: usize = 100;
/// Tags one [`Upkeep::sweep`] visits. Each costs Redis a script call, so
/// with more tags than this they are swept in turn, this many per call: a
/// reserve expires what is due in its own tag before it checks the caps,
/// so only idle tags wait longer, and the sweep's load on Redis stays
/// bounded however many keys there are.
const SWEEP_TAGS_PER_CALL: usize = 256;

impl RedisStore {
    /// Sweeps every known tag (see [`RedisStore::sweep_tags`]).
    pub async fn sweep_expired(&self) -> Result<usize, StoreError> {
        self.sweep_tags(&self.tags()).await
    }

    /// Expires due reservations, forgets closed records past their
    /// retention, folds ledger entries past the ledger buffer, drops
    /// spend aggregate rows past theirs, and forgets rate limits' ended
    /// minutes and customers idle for the customer TTL, under each tag,
    /// in bounded `sweep.lua` calls; returns how many expired.
    /// Reads `tg:meta` first, so a store that lost its epoch fails closed
    /// (and one that had an epoch accepted serves again) without waiting
    /// for a call.
    pub async fn sweep_tags(&self, tags: &[String]) -> Result<usize, StoreError> {
        self.refresh_epoch(self.inner.policy).await?;
        let mut expired = 0;
        for tag in tags {
            let keys = TagKeys::new(tag);
            for _ in 0..SWEEP_CALLS_PER_TAG {
                let args = scripts::sweep_args(
                    SWEEP_BATCH,
                    self.inner.rules.ledger_retention,
                    self.inner.rules.customer_ttl,
                    self.inner.rules.on_expiry,
                    self.inner.rules.aggregate_retention_days,
                );
                let reply = self
                    .run(&self.inner.scripts.sweep, "sweep", &keys, &args)
                    .await?;
                let swept = scripts::sweep_reply(&reply)?;
                self.log_expired(tag, swept.expired);
                if swept.folded > 0 {
                    tracing::warn!(
                        tag = %tag,
                        entries = swept.folded,
                        "ledger entries waited store.ledger_buffer_hours without a sink taking \
                         them: folded into their counters' sums and trimmed from Redis"
                    );
                }
                if swept.customers > 0 || swept.cleared > 0 {
                    tracing::debug!(
                        tag = %tag,
                        customers = swept.customers,
                        fields = swept.cleared,
                        "forgot idle customers and ended rate limit minutes"
                    );
                }
                expired += swept.expired;
                if !swept.more {
                    break;
                }
            }
        }
        Ok(expired)
    }
}

impl Upkeep for RedisStore {
    /// Whether Redis answers (every primary, on a cluster) and serves
    /// under a store epoch (`tg:meta` read again), each within one call
    /// timeout and without retries.
    async fn ping(&self) -> Result<(), StoreError> {
        let once = CallPolicy {
            attempts: 1,
            ..self.inner.policy
        };
        self.inner
            .connection
            .call::<()>(once, "ping", Request::Command(&::redis::cmd("PING")))
            .await?;
        self.refresh_epoch(once).await.map(|_| ())
    }

    /// Sweeps the next [`SWEEP_TAGS_PER_CALL`] tags the store knows, in
    /// turn (see [`RedisStore::sweep_tags`]).
    async fn sweep(&self) -> Result<usize, StoreError> {
        let batch = {
            let tags = self.tags();
            let mut next = self
                .inner
                .next_sweep
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            next_sweep_tags(&tags, &mut next).to_vec()
        };
        self.sweep_tags(&batch).await
    }

    /// Records which tag a configured key's data lives under, so
    /// [`RedisStore::scope_state`] finds it before the key's first reserve,
    /// and [`RedisStore::sweep_expired`] sweeps it.
    fn track_key(&self, key: &str, org: Option<&str>) {
        let mut tags = self.inner.tags();
        let tag = tag_for(org, key);
        tags.all.insert(tag.clone());
        tags.of_key.insert(key.to_owned(), tag);
    }
}

/// The tags the next sweep visits: up to [`SWEEP_TAGS_PER_CALL`] from
/// `*next`, which moves on past them and starts over at the end.
fn next_sweep_tags<'a>(tags: &'a [String], next: &mut usize) -> &'a [String] {
    if *next >= tags.len() {
        *next = 0;
    }
    let end = tags.len().min(*next + SWEEP_TAGS_PER_CALL);
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
        let tags = tags(SWEEP_TAGS_PER_CALL * 2 + 1);
        let mut next = 0;
        let mut swept = Vec::new();
        for size in [SWEEP_TAGS_PER_CALL, SWEEP_TAGS_PER_CALL, 1] {
            let batch = next_sweep_tags(&tags, &mut next);
            assert_eq!(batch.len(), size);
            swept.extend_from_slice(batch);
        }
        assert_eq!(swept, tags);
        // Then the turn starts over.
        assert_eq!(
            next_sweep_tags(&tags, &mut next),
            &tags[..SWEEP_TAGS_PER_CALL]
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
