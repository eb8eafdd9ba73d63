//! What the control plane asks of the Redis books: an operator's
//! adjustment (a refund or a credit, one `adjust.lua` call on the key's
//! tag), and the list of open holds across tags.

use super::books;
use super::meta;
use super::scripts::{self, AdjustReply, TagKeys};
use super::RedisStore;
use crate::budget::{tag_for, AdjustOutcome, Adjustment, OpenHold, StoreError};

impl RedisStore {
    /// Applies an operator's refund or credit to the key and its org in
    /// their current periods, in one `adjust.lua` call; a retry with the
    /// same exec id changes nothing and gets the first outcome.
    ///
    /// Like a reserve, it runs only on books marked with the store epoch,
    /// so a credit never lands on books that vanished.
    pub(super) async fn apply_adjustment(
        &self,
        adjustment: &Adjustment,
    ) -> Result<AdjustOutcome, StoreError> {
        // The script would refuse it as an argument; refused here as an
        // answer, the same one the other stores give.
        if !adjustment.amount_in_range() {
            return Err(adjustment.out_of_range());
        }
        let org = adjustment.org.as_ref().map(|org| org.id.as_str());
        let tag = tag_for(org, &adjustment.key.id);
        // The sweep forgets the adjustment's record, and reconcile reads
        // its entry, under this tag.
        self.remember(&adjustment.key.id, &tag);
        let keys = TagKeys::new(&tag);
        // Tells this call's own earlier attempt (timed out after it
        // applied) from an earlier adjustment with the same exec id.
        let call_id = uuid::Uuid::now_v7().simple().to_string();
        let mut epoch = self.epoch().await?;
        for _ in 0..meta::MARK_ATTEMPTS {
            let args = scripts::adjust_args(adjustment, &epoch, self.closed_record_ms(), &call_id);
            let reply = self
                .run(&self.inner.scripts.adjust, "adjust", &keys, &args)
                .await?;
            return match scripts::adjust_reply(&reply)? {
                AdjustReply::Done(outcome) => Ok(outcome),
                AdjustReply::Mismatch => Err(StoreError::OwnershipMismatch {
                    exec_id: adjustment.exec_id.clone(),
                }),
                AdjustReply::OutOfRange(field) => {
                    tracing::debug!(
                        exec_id = %adjustment.exec_id,
                        field,
                        "adjustment refused: the counter would reach 2^53"
                    );
                    Err(adjustment.out_of_range())
                }
                // Nothing was done: ask again once the tag is marked.
                AdjustReply::Epoch { mark } => {
                    epoch = self.mark_tag(&keys, mark.as_deref()).await?;
                    continue;
                }
            };
        }
        Err(StoreError::Unavailable(format!(
            "the epoch mark of {} kept changing",
            keys.spend()
        )))
    }

    /// Up to `limit` reservations open under `tags`, oldest first (then
    /// by exec id).
    pub async fn open_holds_in(
        &self,
        tags: &[String],
        limit: usize,
    ) -> Result<Vec<OpenHold>, StoreError> {
        let mut holds = Vec::new();
        for tag in tags {
            let mut open = books::open_holds(
                &self.inner.connection,
                self.inner.policy,
                &TagKeys::new(tag),
            )
            .await?;
            // Only the oldest `limit` of each tag can be among the oldest
            // `limit` of all.
            oldest_first(&mut open, limit);
            holds.append(&mut open);
        }
        oldest_first(&mut holds, limit);
        Ok(holds)
    }
}

fn oldest_first(holds: &mut Vec<OpenHold>, limit: usize) {
    holds.sort_by(|a, b| (a.started_at, &a.exec_id).cmp(&(b.started_at, &b.exec_id)));
    holds.truncate(limit);
}
