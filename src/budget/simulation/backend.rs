//! The stores a simulation runs against, each with control over its time
//! and a way to crash it: the memory store and the SQLite store on a
//! manual clock, the Redis store on the test process's shared
//! `redis-server` with its clock shifted (`redis::testing`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::ops::World;
use crate::budget::memory::testing::ManualClock;
use crate::budget::redis::testing::shared_url;
use crate::budget::{
    BudgetStore, LedgerEntry, MemoryStore, Reconciliation, RedisStore, Reports, Rules, SqliteStore,
    StoreError, Upkeep, DEFAULT_LEDGER_RETENTION,
};

/// Which store to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Memory,
    Sqlite,
    Redis,
}

/// The rules of every simulated store. Closed records, applied
/// adjustments and idle runs are kept far longer than any simulation
/// runs, so a retry always finds its first answer: forgetting them is
/// the contract suite's business, and on Redis it follows the real clock,
/// not the shifted one. (Expired records are still forgotten a TTL after
/// expiry; the generator never settles one after that.)
pub(super) fn rules(world: &World) -> Rules {
    let forever = Duration::from_secs(10 * 365 * 24 * 3600);
    Rules {
        settle_epsilon: super::ops::EPSILON,
        on_expiry: world.on_expiry,
        closed_record: forever,
        run_ttl: forever,
        ledger_retention: DEFAULT_LEDGER_RETENTION,
        ..Rules::default()
    }
}

/// Real time the Redis store's clock may run ahead of the model's before
/// it is shifted back: well under half a tick (see `ops::TICK_SECS`).
const MAX_REDIS_DRIFT_MS: i64 = 2_000;

pub(super) enum Backend {
    Memory {
        store: MemoryStore,
        clock: Arc<ManualClock>,
    },
    Sqlite {
        /// `None` only for the moment of a crash.
        store: Option<SqliteStore>,
        /// The writer was told to stop posting its journal to the file.
        paused: bool,
        clock: Arc<ManualClock>,
        path: PathBuf,
        rules: Rules,
        _dir: tempfile::TempDir,
    },
    Redis {
        store: RedisStore,
        rules: Rules,
        records_tag: String,
        /// The shift of the store's clock from Redis's, so a gateway
        /// connecting after a crash sees the same time.
        offset_ms: i64,
        /// Every key and its org, told to a gateway that connects anew.
        keys: Vec<(String, Option<String>)>,
    },
}

impl Backend {
    pub(super) async fn new(kind: Kind, world: &World, start: DateTime<Utc>) -> Backend {
        let rules = rules(world);
        match kind {
            Kind::Memory => {
                let clock = Arc::new(ManualClock::new(start));
                Backend::Memory {
                    store: MemoryStore::with_clock(rules, clock.clone()),
                    clock,
                }
            }
            Kind::Sqlite => {
                let clock = Arc::new(ManualClock::new(start));
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("tollgate.db");
                Backend::Sqlite {
                    store: Some(SqliteStore::with_clock(&path, rules, clock.clone())),
                    paused: false,
                    clock,
                    path,
                    rules,
                    _dir: dir,
                }
            }
            Kind::Redis => {
                let records_tag = format!("tollgate:admin:sim-{}", Uuid::now_v7().simple());
                let keys = world
                    .keys
                    .iter()
                    .enumerate()
                    .map(|(i, key)| (key.id.clone(), world.org_of(i).map(|org| org.id.clone())))
                    .collect();
                let store = RedisStore::connect(shared_url(), rules)
                    .await
                    .unwrap()
                    .with_records_tag(&records_tag);
                let mut backend = Backend::Redis {
                    store,
                    rules,
                    records_tag,
                    offset_ms: 0,
                    keys,
                };
                backend.track_keys();
                backend.sync_clock(start).await;
                backend
            }
        }
    }

    pub(super) fn store(&self) -> BudgetStore {
        match self {
            Backend::Memory { store, .. } => BudgetStore::Memory(store.clone()),
            Backend::Sqlite { store, .. } => BudgetStore::Sqlite(store.clone().unwrap()),
            Backend::Redis { store, .. } => BudgetStore::Redis(store.clone()),
        }
    }

    /// Moves the store's clock on by `by` and sweeps: every due hold
    /// expires. `now` is the model's time after the move.
    pub(super) async fn advance(
        &mut self,
        by: Duration,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        match self {
            Backend::Memory { store, clock } => {
                clock.advance(by);
                store.sweep_expired();
            }
            Backend::Sqlite { store, clock, .. } => {
                clock.advance(by);
                store.as_ref().unwrap().sweep().await?;
            }
            Backend::Redis { .. } => {
                self.sync_clock(now).await;
                if let Backend::Redis { store, .. } = self {
                    store.sweep_expired().await?;
                }
            }
        }
        Ok(())
    }

    /// Shifts the Redis store's clock to `now`, give or take the real
    /// time the next steps take: when it runs more than a little ahead
    /// (real time passing), or behind (the model moved on).
    pub(super) async fn sync_clock(&mut self, now: DateTime<Utc>) {
        if let Backend::Redis {
            store, offset_ms, ..
        } = self
        {
            let store_now = store.now().await.unwrap();
            let ahead = (store_now - now).num_milliseconds();
            if !(0..=MAX_REDIS_DRIFT_MS).contains(&ahead) {
                store.shift_clock(-ahead);
                *offset_ms -= ahead;
            }
        }
    }

    fn track_keys(&self) {
        if let Backend::Redis { store, keys, .. } = self {
            for (key, org) in keys {
                store.track_key(key, org.as_deref());
            }
        }
    }

    /// SQLite: stops posting the journal to the file.
    pub(super) fn pause_posting(&mut self) {
        if let Backend::Sqlite { store, paused, .. } = self {
            store.as_ref().unwrap().set_posting(false);
            *paused = true;
        }
    }

    /// Whether the SQLite writer is paused. Its owner's `reconcile` reads
    /// the file, which then lags what the calls were answered (the desk
    /// and the journal hold the rest until the crash that follows).
    pub(super) fn posting_paused(&self) -> bool {
        matches!(self, Backend::Sqlite { paused: true, .. })
    }

    /// SQLite: the process dies, and the store is reopened from its file
    /// and journal. Redis: the gateway is dropped without a word and
    /// another connects.
    pub(super) async fn crash(&mut self) {
        match self {
            Backend::Memory { .. } => {}
            Backend::Sqlite {
                store,
                paused,
                clock,
                path,
                rules,
                ..
            } => {
                *paused = false;
                store.take().unwrap().crash();
                *store = Some(SqliteStore::with_clock(path, *rules, clock.clone()));
            }
            Backend::Redis {
                store,
                rules,
                records_tag,
                offset_ms,
                ..
            } => {
                let next = RedisStore::connect(shared_url(), *rules)
                    .await
                    .unwrap()
                    .with_records_tag(records_tag);
                next.shift_clock(*offset_ms);
                *store = next;
                self.track_keys();
            }
        }
    }

    pub(super) async fn reconcile(&self) -> Result<Vec<Reconciliation>, StoreError> {
        self.store().reconcile().await
    }

    /// Every ledger entry the store still holds one by one.
    pub(super) async fn ledger(&self) -> Vec<LedgerEntry> {
        match self {
            Backend::Memory { store, .. } => store.ledger(),
            Backend::Sqlite { store, .. } => store.as_ref().unwrap().ledger().await,
            Backend::Redis { store, .. } => {
                let mut entries = Vec::new();
                for tag in store.tags() {
                    entries.extend(store.ledger(&tag).await.unwrap());
                }
                entries
            }
        }
    }
}
