//! The Redis fixtures of the contract suite: a fresh [`RedisStore`] per
//! case, on the server or on the cluster this test process starts for
//! every case (`redis::testing`).
//!
//! Each case uses fresh ids, hence fresh hash tags, so its data is its own
//! on the shared server; the fixture reads back only the tags its store
//! reserved under. The admin API's documents live under one tag, which
//! cases running at once would share: each fixture's store keeps them
//! under a tag of its own.
//!
//! The store's clock is Redis's, shifted so a case starts around noon UTC
//! (no case then straddles a day boundary by accident); short advances
//! sleep, long ones shift the clock further.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Fixture;
use crate::budget::redis::testing::{cluster, shared_url};
use crate::budget::Reports;
use crate::budget::{BudgetStore, LedgerEntry, OnExpiry, Reconciliation, RedisStore};
use crate::money::UsdMicros;

/// Advances up to this long are slept through, exercising the real clock.
const LONGEST_SLEEP: Duration = Duration::from_secs(5);

pub(super) struct RedisFixture {
    store: RedisStore,
    on_expiry: OnExpiry,
}

pub(super) async fn redis_fixture(on_expiry: OnExpiry) -> RedisFixture {
    fixture_on(shared_url(), on_expiry).await
}

pub(super) async fn cluster_fixture(on_expiry: OnExpiry) -> RedisFixture {
    let url = tokio::task::spawn_blocking(|| cluster().url())
        .await
        .unwrap();
    fixture_on(&url, on_expiry).await
}

async fn fixture_on(url: &str, on_expiry: OnExpiry) -> RedisFixture {
    let records_tag = format!("tollgate:admin:test-{}", Uuid::now_v7().simple());
    let store = RedisStore::connect(url, super::rules(on_expiry))
        .await
        .unwrap()
        .with_records_tag(&records_tag);
    let now = store.now().await.unwrap();
    let noon = now.date_naive().and_hms_opt(12, 0, 0).unwrap().and_utc();
    store.shift_clock((noon - now).num_milliseconds());
    RedisFixture { store, on_expiry }
}

impl Fixture for RedisFixture {
    fn store(&self) -> BudgetStore {
        BudgetStore::Redis(self.store.clone())
    }

    fn on_expiry(&self) -> OnExpiry {
        self.on_expiry
    }

    async fn now(&self) -> DateTime<Utc> {
        self.store.now().await.unwrap()
    }

    async fn advance(&self, by: Duration) {
        if by <= LONGEST_SLEEP {
            tokio::time::sleep(by).await;
        } else {
            self.store
                .shift_clock(i64::try_from(by.as_millis()).unwrap());
        }
    }

    async fn sweep_expired(&self) -> usize {
        self.store.sweep_expired().await.unwrap()
    }

    async fn ledger(&self) -> Vec<LedgerEntry> {
        let mut entries = Vec::new();
        for tag in self.store.tags() {
            entries.extend(self.store.ledger(&tag).await.unwrap());
        }
        entries.sort_by_key(|entry| entry.at);
        entries
    }

    async fn open_reservations(&self) -> (usize, UsdMicros) {
        self.store.open_reservations().await.unwrap()
    }

    async fn reconcile(&self) -> Vec<Reconciliation> {
        self.store.reconcile().await.unwrap()
    }
}
