//! The Redis store's reports: spend aggregates, the open reservations and
//! the books as `reconcile` reads them, under given tags or under every
//! tag the store knows.

use super::scripts::TagKeys;
use super::{aggregates, books, RedisStore};
use crate::budget::{LedgerEntry, Reconciliation, Reports, SpendQuery, SpendRow, StoreError};
use crate::money::UsdMicros;

impl RedisStore {
    /// The tag's ledger entries not yet folded, oldest first.
    pub async fn ledger(&self, tag: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let lines = books::read_ledger(
            &self.inner.connection,
            self.inner.policy,
            &TagKeys::new(tag),
            None,
        )
        .await?;
        Ok(lines.into_iter().map(|line| line.entry).collect())
    }

    /// How many reservations are open under `tags` and the sum of their
    /// amounts.
    pub async fn open_reservations_in(
        &self,
        tags: &[String],
    ) -> Result<(usize, UsdMicros), StoreError> {
        let mut total: (usize, UsdMicros) = (0, 0);
        for tag in tags {
            let (count, sum) = books::open_reservations(
                &self.inner.connection,
                self.inner.policy,
                &TagKeys::new(tag),
            )
            .await?;
            total = (total.0 + count, total.1.saturating_add(sum));
        }
        Ok(total)
    }

    /// The spend aggregate rows under `tags` that `query` wants, by day,
    /// key, run, customer and model.
    pub async fn spend_in(
        &self,
        tags: &[String],
        query: &SpendQuery,
    ) -> Result<Vec<SpendRow>, StoreError> {
        aggregates::spend(&self.inner.connection, self.inner.policy, tags, query).await
    }

    /// Every scope and period under `tags` with its counter, folded sum,
    /// ledger sum and open sum, each tag read at one consistent instant.
    pub async fn reconcile_in(&self, tags: &[String]) -> Result<Vec<Reconciliation>, StoreError> {
        let mut rows = Vec::new();
        for tag in tags {
            let keys = TagKeys::new(tag);
            let inner = &self.inner;
            rows.extend(
                books::reconcile(&inner.connection, &inner.scripts, inner.policy, &keys).await?,
            );
        }
        rows.sort_by(|a, b| (a.kind, &a.id, &a.period_id).cmp(&(b.kind, &b.id, &b.period_id)));
        Ok(rows)
    }
}

/// Every report reads under every tag the store knows.
impl Reports for RedisStore {
    async fn spend(&self, query: &SpendQuery) -> Result<Vec<SpendRow>, StoreError> {
        self.spend_in(&self.tags(), query).await
    }

    async fn open_reservations(&self) -> Result<(usize, UsdMicros), StoreError> {
        self.open_reservations_in(&self.tags()).await
    }

    async fn reconcile(&self) -> Result<Vec<Reconciliation>, StoreError> {
        self.reconcile_in(&self.tags()).await
    }
}
