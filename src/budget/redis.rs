//! The Redis budget store: the budget protocol as one atomic Lua script per
//! operation (`lua/`), so any number of gateways share exact caps.
//!
//! Layout. Everything a key and its org share lives under one hash tag
//! ([`tag_for`]: the org id, or `key:<key id>` without an org), in eight
//! fixed keys per tag that every script receives in `KEYS`:
//!
//! | key              | type   | holds |
//! |------------------|--------|-------|
//! | `tg:{T}:spend`   | hash   | `<kind>:<id>:<counter period>` committed (spent + reserved) of a key, org, run, model group or customer (the counter period is the period id for money, `<period id>/requests` or `…/tokens` for a rate limit: `Meter::counter_period`), `…:r` its reserved part, `…:f` its folded ledger sum, `folds` the trim count, `epoch` the store epoch the books were written under; `seen:<key>/<customer>` a customer's last call (`customers`), `gone:<key>/<customer>` one forgotten, `pass` the sweep's pass over this hash |
//! | `tg:{T}:res`     | hash   | exec id → reservation record (JSON); `claim:<claim>` → the exec id holding that idempotency claim; `adj:<exec id>` → an applied adjustment's record |
//! | `tg:{T}:pending` | zset   | open exec ids by deadline |
//! | `tg:{T}:closed`  | zset   | expired exec ids by when their record may be forgotten; runs by when they are |
//! | `tg:{T}:ledger`  | stream | one entry per settle, expiry or adjustment |
//! | `tg:{T}:agg`     | hash   | `<day>\|<key>[/<run>][#<customer>]\|<model>\|<metric>` spend aggregates moved with every ledger entry (`aggregates`); `kept_from`, `scan` the sweep's retention pass |
//! | `tg:{T}:done`    | list   | `<ms>\|<exec id>`: settled and denied records (and `adj:<exec id>`s), in the order they closed, with when each may be forgotten |
//! | `tg:{T}:cust`    | zset   | `<key>/<customer>`, score 0: the customers remembered, in id order (`customers`) |
//!
//! The admin API's keys and orgs live under a tag of their own,
//! `tollgate:admin` (`records`). One more key lies outside every tag:
//! `tg:meta`, the layout version and the store epoch. A Redis restarted
//! without its data has lost both, and the store fails closed until an
//! operator accepts a new epoch (`meta`).
//!
//! One Redis key per reservation (`tg:{acme}:res:<id>`) would be simpler,
//! but the lazy expiry inside `reserve` would then touch reservation keys not
//! passed in `KEYS`, which a Redis Cluster forbids. A fixed set of keys per
//! tag keeps every script in one slot with every key declared.
//!
//! The ledger stream is a buffer, not the books of record: a gateway
//! configured with a sink drains it continuously (`drain`: read a page,
//! the sink commits it, `drain.lua` folds and trims exactly that page), and
//! entries no sink took are folded and trimmed in whole hours by the sweep
//! once older than the ledger buffer (`store.ledger_buffer_hours`). Either
//! way an entry's actual is added to the `…:f` fields it charged in the
//! script that trims it (`lua/fold.lua`): `counter == folded + Σ ledger +
//! Σ open` stays exact.
//!
//! The sweep also walks the spend hash, a bounded HSCAN page per call
//! and a pass at most once a minute (`lua/sweep.lua`): it deletes rate
//! limits' counters of minutes that ended more than two minutes ago, and
//! forgets customers without a call for `store.customer_ttl_days` (their
//! entry at once, with the counters of their last call's periods; their
//! older counters as the pass meets them). The `cust` key came without a
//! layout change, like `agg`: a gateway of an older build passes seven
//! keys and never names a customer.
//!
//! Spend aggregate rows older than the aggregate retention (whole UTC
//! days) are deleted by the sweep, a bounded HSCAN page per call, and only
//! once a day per tag. The `agg` key came after layout 1 without a layout
//! change: a tag without it simply has no rows yet, and a gateway of an
//! older build, which passes five keys, books no rows (its calls are
//! missing from spend reports, never from the counters).
//!
//! Time is Redis's `TIME`. Only a test build can shift it (`test_clock`,
//! `lua/test/clock.lua`); production scripts take no offset.
//!
//! A key's counters live under its org's tag, so a key belongs to one org
//! (or none) for good: moved to another org in the config, it starts a
//! fresh key counter under the new tag.
//!
//! A settle names its key and org, which pick the tag it looks in. A forged
//! org or a missing one points at another tag, where the exec id is absent;
//! to answer `OwnershipMismatch` rather than `UnknownReservation` there, the
//! store then looks for the exec id under every other tag it knows (the
//! configured ones and those it has reserved under). That lookup runs only
//! on this error path.

mod aggregates;
mod alerts;
mod books;
mod connection;
mod control;
mod customers;
mod drain;
mod meta;
mod records;
mod reports;
mod scripts;
mod sweep;
#[cfg(test)]
mod test_clock;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};

pub use connection::RedisUrlError;
pub use drain::StreamEntry;
pub use meta::{accept_epoch, AcceptedEpoch, LAYOUT};

/// The SHA1 Redis knows the script of `lua/<name>.lua` by, as this build
/// sends it (EVALSHA's first argument in `MONITOR`, what `SCRIPT EXISTS`
/// takes); `None` for no such script.
pub fn script_sha(name: &str) -> Option<String> {
    Scripts::new().sha(name).map(str::to_owned)
}

use super::caps::model_scope_parts;
use super::{
    run_key_of, tag_for, AdjustOutcome, Adjustment, Books, ClaimedReserve, CustomerSeen, OpenHold,
    ReserveOutcome, ReserveRequest, Rules, RunState, Scope, ScopeKind, ScopeState, SettleOutcome,
    Settlement, StoreError,
};
use crate::config::RedisTls;
use crate::money::{UsdMicros, MAX_USD_MICROS};
use books::Record;
use connection::{redacted, CallPolicy, Connection, Request};
use scripts::{ReserveReply, Scripts, SettleReply, TagKeys};

/// Due reservations one `reserve` expires (and closed records it forgets)
/// before its own work, as in the memory store.
const LAZY_SWEEP_LIMIT: usize = 64;
/// A handle to the Redis store; clones share one connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    /// The URL without credentials, for logs.
    endpoint: String,
    scripts: Scripts,
    policy: CallPolicy,
    /// Every script is told what it needs of them. The ledger retention is
    /// the ledger buffer here: how long an entry waits in the stream for a
    /// sink to take it (`drain`) before the sweep folds it without one.
    rules: Rules,
    /// The store epoch this store serves under, or why it fails closed.
    epoch: meta::EpochWatch,
    /// Added to Redis's clock by every script that reads it; see
    /// `test_clock`.
    #[cfg(test)]
    clock_offset_ms: std::sync::atomic::AtomicI64,
    tags: Mutex<Tags>,
    /// Where the next [`Upkeep::sweep`] starts in the sorted tags.
    next_sweep: Mutex<usize>,
    /// Where the admin API's keys and orgs live (`records`).
    records: records::RecordKeys,
}

/// The tags this store knows: configured, or reserved under since start.
#[derive(Default)]
struct Tags {
    all: BTreeSet<String>,
    /// Each known key's tag, so a key scope's counters can be found from
    /// the scope alone.
    of_key: HashMap<String, String>,
}

impl RedisStore {
    /// A store on `url`:
    /// - `redis://[user:password@]host[:port][/db]`: one node;
    /// - `redis+cluster://[user:password@]host:port[,host:port…]`, or a
    ///   `redis://` URL with several comma-separated `host:port`s: a Redis
    ///   Cluster seeded from those nodes;
    /// - the same with `rediss` for TLS, the server's certificate checked
    ///   against the Mozilla roots compiled in ([`RedisStore::connect_tls`]
    ///   takes a CA and a client certificate).
    ///
    /// It does not connect here: the first call does, and every later call
    /// reconnects if needed, so this never fails on an unreachable server,
    /// only on a malformed URL (or `#insecure`, which is refused).
    /// The store keeps its books by `rules`. Must be called from within a
    /// Tokio runtime.
    pub async fn connect(url: &str, rules: Rules) -> Result<RedisStore, RedisUrlError> {
        RedisStore::connect_tls(url, &RedisTls::default(), rules).await
    }

    /// [`RedisStore::connect`] with `tls`'s CA and client certificate for a
    /// `rediss://` URL.
    pub async fn connect_tls(
        url: &str,
        tls: &RedisTls,
        rules: Rules,
    ) -> Result<RedisStore, RedisUrlError> {
        RedisStore::open(url, tls, rules, CallPolicy::default())
    }

    #[cfg(test)]
    fn with_policy(
        url: &str,
        rules: Rules,
        policy: CallPolicy,
    ) -> Result<RedisStore, RedisUrlError> {
        RedisStore::open(url, &RedisTls::default(), rules, policy)
    }

    fn open(
        url: &str,
        tls: &RedisTls,
        rules: Rules,
        policy: CallPolicy,
    ) -> Result<RedisStore, RedisUrlError> {
        Ok(RedisStore {
            inner: Arc::new(Inner {
                connection: Connection::open(url, tls, policy)?,
                endpoint: redacted(url),
                scripts: Scripts::new(),
                policy,
                rules,
                epoch: meta::EpochWatch::default(),
                #[cfg(test)]
                clock_offset_ms: std::sync::atomic::AtomicI64::new(0),
                tags: Mutex::new(Tags::default()),
                next_sweep: Mutex::new(0),
                records: records::RecordKeys::new(records::RECORDS_TAG),
            }),
        })
    }

    fn closed_record_ms(&self) -> u64 {
        scripts::millis(self.inner.rules.closed_record)
    }

    /// The URL without its credentials.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// Every tag this store knows, sorted.
    pub fn tags(&self) -> Vec<String> {
        self.inner.tags().all.iter().cloned().collect()
    }

    async fn reserve_under(
        &self,
        req: &ReserveRequest,
        claim: Option<&str>,
    ) -> Result<ClaimedReserve, StoreError> {
        let tag = tag_for(req.org.as_ref().map(|org| org.id.as_str()), &req.key.id);
        self.remember(&req.key.id, &tag);
        let keys = TagKeys::new(&tag);
        let mut epoch = self.epoch().await?;
        // Only a tag's first reserve since start, or one after the store
        // lost its books, goes round more than once.
        for _ in 0..meta::MARK_ATTEMPTS {
            let args = scripts::reserve_args(
                req,
                claim,
                LAZY_SWEEP_LIMIT,
                self.inner.rules.on_expiry,
                &epoch,
                self.closed_record_ms(),
                scripts::millis(self.inner.rules.run_ttl),
            )?;
            let reply = self
                .run(&self.inner.scripts.reserve, "reserve", &keys, &args)
                .await?;
            let (expired, answer) = match scripts::reserve_reply(&reply)? {
                ReserveReply::Reserved {
                    expired,
                    amount,
                    levels,
                } => (
                    expired,
                    ClaimedReserve::Ran(ReserveOutcome::Reserved { amount, levels }),
                ),
                ReserveReply::RunCapConflict { expired, cap } => (
                    expired,
                    ClaimedReserve::Ran(ReserveOutcome::RunCapConflict { cap }),
                ),
                ReserveReply::Denied { expired, denial } => {
                    (expired, ClaimedReserve::Ran(ReserveOutcome::Denied(denial)))
                }
                ReserveReply::Duplicate { expired } => (expired, ClaimedReserve::Duplicate),
                // Nothing was done: ask again once the tag is marked.
                ReserveReply::Epoch { mark } => {
                    epoch = self.mark_tag(&keys, mark.as_deref()).await?;
                    continue;
                }
            };
            self.log_expired(&tag, expired);
            return Ok(answer);
        }
        Err(StoreError::Unavailable(format!(
            "the epoch mark of {} kept changing",
            keys.spend()
        )))
    }

    async fn settle_under_tag(
        &self,
        settlement: &Settlement,
        look_elsewhere: bool,
    ) -> Result<SettleOutcome, StoreError> {
        // The script would refuse it as an argument; refused here as an
        // answer, the same one the memory store gives.
        if settlement.actual > MAX_USD_MICROS {
            return Err(StoreError::OutOfRange {
                exec_id: settlement.exec_id.clone(),
            });
        }
        // A store that lost its epoch still settles (a record that vanished
        // is an unknown reservation); one of a newer layout runs nothing.
        if let Some(refusal) = self.inner.epoch.refusal() {
            return Err(refusal);
        }
        let tag = tag_for(settlement.org.as_deref(), &settlement.key);
        let keys = TagKeys::new(&tag);
        // Tells this call's own earlier attempt (timed out after it
        // applied) from an earlier settle of the same exec id.
        let call_id = uuid::Uuid::now_v7().simple().to_string();
        let args = scripts::settle_args(
            settlement,
            self.inner.rules.settle_epsilon,
            &call_id,
            self.inner.rules.on_expiry,
            self.closed_record_ms(),
        );
        let reply = self
            .run(&self.inner.scripts.settle, "settle", &keys, &args)
            .await?;
        let exec_id = &settlement.exec_id;
        match scripts::settle_reply(&reply)? {
            SettleReply::Settled {
                outcome,
                expired_now,
            } => {
                self.log_expired(&tag, usize::from(expired_now));
                // An overrun or a late settle is logged by the caller, which
                // knows the call's model (`settle::log_outcome`), not here
                // as well.
                Ok(outcome)
            }
            SettleReply::Mismatch => Err(StoreError::OwnershipMismatch {
                exec_id: exec_id.clone(),
            }),
            SettleReply::OutOfRange(field) => {
                tracing::debug!(%exec_id, field, "settle refused: the counter would reach 2^53");
                Err(StoreError::OutOfRange {
                    exec_id: exec_id.clone(),
                })
            }
            SettleReply::Denied => Err(StoreError::UnknownReservation(exec_id.clone())),
            SettleReply::Absent if look_elsewhere => Err(self.absent(exec_id, &tag).await?),
            SettleReply::Absent => Err(StoreError::UnknownReservation(exec_id.clone())),
        }
    }

    /// Why an exec id absent under its settlement's tag cannot be settled:
    /// held under another tag (so another key or org owns it), or unknown.
    async fn absent(&self, exec_id: &str, tried: &str) -> Result<StoreError, StoreError> {
        for tag in self.tags().iter().filter(|tag| *tag != tried) {
            let keys = TagKeys::new(tag);
            let mut hget = ::redis::cmd("HGET");
            hget.arg(keys.res()).arg(exec_id);
            let raw: Option<String> = self
                .inner
                .connection
                .call(
                    self.inner.policy,
                    "look for a reservation",
                    Request::Command(&hget),
                )
                .await?;
            if let Some(raw) = raw {
                return Ok(if Record::parse(&raw)?.s == "denied" {
                    StoreError::UnknownReservation(exec_id.to_owned())
                } else {
                    StoreError::OwnershipMismatch {
                        exec_id: exec_id.to_owned(),
                    }
                });
            }
        }
        Ok(StoreError::UnknownReservation(exec_id.to_owned()))
    }

    /// The store's clock: Redis's `TIME`.
    pub async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        let (secs, micros): (i64, i64) = self
            .inner
            .connection
            .call(
                self.inner.policy,
                "read the time",
                Request::Command(&::redis::cmd("TIME")),
            )
            .await?;
        let ms = secs.saturating_mul(1_000).saturating_add(micros / 1_000);
        #[cfg(test)]
        let ms = ms.saturating_add(self.inner.clock_offset_ms());
        scripts::store_time(ms)
    }

    /// Runs one script on the tag's keys; its reply is a list of strings.
    /// In a test build the clock offset goes last (`lua/test/clock.lua`
    /// takes it off before the script's body reads its ARGV).
    async fn run(
        &self,
        script: &::redis::Script,
        what: &'static str,
        keys: &TagKeys,
        args: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in keys.all() {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        #[cfg(test)]
        invocation.arg(self.inner.clock_offset_ms());
        self.inner
            .connection
            .call(self.inner.policy, what, Request::Script(&invocation))
            .await
    }

    fn log_expired(&self, tag: &str, expired: usize) {
        if expired > 0 {
            super::log_expired(Some(tag), expired, self.inner.rules.on_expiry);
        }
    }

    /// The tag a key's books live under: as configured or last reserved
    /// under, else that of a key without an org.
    fn tag_of_key(&self, key: &str) -> String {
        self.inner
            .tags()
            .of_key
            .get(key)
            .cloned()
            .unwrap_or_else(|| tag_for(None, key))
    }

    fn remember(&self, key: &str, tag: &str) {
        let mut tags = self.inner.tags();
        if tags.of_key.get(key).map(String::as_str) != Some(tag) {
            tags.of_key.insert(key.to_owned(), tag.to_owned());
        }
        if !tags.all.contains(tag) {
            tags.all.insert(tag.to_owned());
        }
    }
}

// === the interface ===

impl Books for RedisStore {
    /// Reserves `req.amount` against the key, its org, its run and its
    /// other caps, all or nothing, in one `reserve.lua` call; a retry with the same `exec_id` gets the
    /// first answer.
    async fn reserve(&self, req: &ReserveRequest) -> Result<ReserveOutcome, StoreError> {
        match self.reserve_under(req, None).await? {
            ClaimedReserve::Ran(outcome) => Ok(outcome),
            // Only a claim makes a duplicate: the script broke its contract.
            ClaimedReserve::Duplicate => Err(StoreError::Unavailable(
                "reserve.lua answered `duplicate` to a reserve without a claim".to_owned(),
            )),
        }
    }

    /// Reserves like [`RedisStore::reserve`], unless an open reservation
    /// under another exec id holds `claim`: then the request is a duplicate
    /// of one still in flight, and nothing is charged. Every attempt of
    /// this call (retried on a timeout) carries the same exec id, so an
    /// attempt after one that reserved gets `Reserved`, not `Duplicate`.
    async fn reserve_claimed(
        &self,
        req: &ReserveRequest,
        claim: &str,
    ) -> Result<ClaimedReserve, StoreError> {
        self.reserve_under(req, Some(claim)).await
    }

    /// Settles a reservation with its actual cost, exactly once, in one
    /// `settle.lua` call.
    async fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        self.settle_under_tag(settlement, true).await
    }

    /// Settles like [`RedisStore::settle`] a reserve whose outcome was never
    /// known (it failed, or its caller went away): an exec id absent under
    /// its tag never landed, and is `UnknownReservation` at once, without
    /// the look under every other tag that tells a forged owner apart.
    async fn settle_if_reserved(
        &self,
        settlement: &Settlement,
    ) -> Result<SettleOutcome, StoreError> {
        self.settle_under_tag(settlement, false).await
    }

    /// The scope's counters in the period current on the store's clock.
    async fn scope_state(&self, scope: &Scope) -> Result<ScopeState, StoreError> {
        // Counters that vanished would read as nothing spent.
        self.epoch().await?;
        // A model group lives under its owner's tag: an org's group under
        // the org's, a key's under that key's; a run and a customer under
        // their key's.
        let (owner, key) = match scope.kind {
            ScopeKind::Run | ScopeKind::Customer => (ScopeKind::Key, run_key_of(&scope.id)),
            ScopeKind::Model => match model_scope_parts(&scope.id) {
                Some((owner, owner_id, _)) => (owner, owner_id),
                None => {
                    return Err(StoreError::Refused(format!(
                        "{:?} is not a model group's scope id",
                        scope.id
                    )))
                }
            },
            kind => (kind, scope.id.as_str()),
        };
        let tag = match owner {
            ScopeKind::Org => key.to_owned(),
            _ => self.tag_of_key(key),
        };
        let args = scripts::state_args(scope);
        let reply = self
            .run(
                &self.inner.scripts.state,
                "read a scope",
                &TagKeys::new(&tag),
                &args,
            )
            .await?;
        let (now, period_id, committed, reserved) = scripts::state_reply(&reply)?;
        Ok(ScopeState {
            period_id,
            spent: committed.saturating_sub(reserved),
            reserved,
            resets_at: scope.period.resets_at(now),
        })
    }

    /// A run's cap and counters (`id` is `<key>/<run>`), if it is
    /// remembered: read under its key's tag.
    async fn run_state(&self, id: &str) -> Result<Option<RunState>, StoreError> {
        self.epoch().await?;
        let tag = self.tag_of_key(run_key_of(id));
        let field = format!("run:{id}:total");
        let mut hmget = ::redis::cmd("HMGET");
        hmget
            .arg(TagKeys::new(&tag).spend())
            .arg(&field)
            .arg(format!("{field}:r"))
            .arg(format!("{field}:cap"));
        let values: Vec<Option<String>> = self
            .inner
            .connection
            .call(self.inner.policy, "read a run", Request::Command(&hmget))
            .await?;
        let number = |value: &Option<String>| -> UsdMicros {
            value.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        let Some(cap) = values.get(2).cloned().flatten() else {
            return Ok(None);
        };
        let committed = values.first().map_or(0, number);
        let reserved = values.get(1).map_or(0, number);
        Ok(Some(RunState {
            cap: cap.parse().ok(),
            spent: committed.saturating_sub(reserved),
            reserved,
        }))
    }

    /// A key's customers, read under its tag: by id from the tag's `cust`
    /// set, each with its last call from its `seen:` field.
    async fn customers(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CustomerSeen>, StoreError> {
        // Customers that vanished would read as never seen.
        self.epoch().await?;
        let keys = TagKeys::new(&self.tag_of_key(key));
        customers::page(
            &self.inner.connection,
            self.inner.policy,
            &keys,
            key,
            after,
            limit,
        )
        .await
    }

    async fn adjust(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        self.apply_adjustment(adjustment).await
    }

    async fn open_holds(&self, limit: usize) -> Result<Vec<OpenHold>, StoreError> {
        self.open_holds_in(&self.tags(), limit).await
    }
}

impl Inner {
    fn tags(&self) -> MutexGuard<'_, Tags> {
        // Nothing panics while the lock is held; a poisoned lock still
        // holds a usable set.
        self.tags.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("endpoint", &self.inner.endpoint)
            .field("rules", &self.inner.rules)
            .finish_non_exhaustive()
    }
}
