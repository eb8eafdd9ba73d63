//! The store's record of itself, `tg:meta`: the layout version of what the
//! scripts write, and the store epoch (see `lua/meta.lua`).
//!
//! Redis holds the money: a Redis restarted without its data forgets what
//! was spent, and gateways that carried on would let every key spend its
//! cap again. So each gateway remembers the epoch it saw, every tag's books
//! carry the epoch they were written under (the `epoch` field of its spend
//! hash), and `reserve.lua` charges nothing unless that mark is the epoch
//! the gateway passes. A tag without a mark is new, or its books vanished:
//! the gateway reads `tg:meta`, and marks the tag only while `tg:meta`
//! still holds the epoch it saw. When the epoch is gone, the store fails
//! closed (every reserve and `/readyz` answer 503) until an operator
//! accepts a fresh epoch with `tollgate admin store accept-epoch`.
//!
//! What a store does on reading `tg:meta` ([`step`]):
//! - missing, and it never saw an epoch: creates one (`meta.lua`, atomic,
//!   so gateways starting together agree on one);
//! - missing, and it saw an epoch it has not lost yet: reads it again
//!   shortly after, since one empty read proves nothing (see below);
//! - missing on that second read, or another epoch not accepted after the
//!   one it saw: fails closed, logging it once;
//! - an epoch accepted after the one it saw (or any, if it saw none):
//!   adopts it; the tags are marked again on their first reserve;
//! - a layout newer than [`LAYOUT`]: refuses the store, logging it once;
//!   an older one: migrates it in place ([`RedisStore::migrate`]).
//!
//! The normal path costs nothing more than the mark check inside
//! `reserve.lua`; `tg:meta` is read on a tag's first reserve since the
//! gateway started, by `/readyz`, and once per periodic sweep, which is
//! how a failed-closed gateway sees an accepted epoch within a second.
//!
//! Those reads run concurrently, and a read answered before another call
//! of the same store created `tg:meta` can be looked at after that call
//! put the store in service: at start-up, `/readyz` and the first sweep
//! race each other like this. Losing an epoch fails the store closed until
//! an operator steps in, so it takes two reads finding `tg:meta` missing,
//! the second sent after the first was looked at (and after
//! [`CONFIRM_MISSING_AFTER`]): by then whatever created `tg:meta` has
//! landed. The second read costs nothing on the normal path, which never
//! finds `tg:meta` missing once it has an epoch.
//!
//! On a Redis Cluster, `tg:meta` lives in one slot: a shard that restarts
//! empty while `tg:meta`'s shard keeps its data leaves its tags unmarked,
//! which reads as new tags. Persistence on every node is still required.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ::redis::Script;

use super::connection::{CallPolicy, Request};
use super::scripts::{store_time, TagKeys};
use super::RedisStore;
use crate::budget::StoreError;

/// The layout this binary reads and writes: 1 added `tg:meta` and the
/// tags' epoch marks; 2 the `done` list and compact settled records.
pub const LAYOUT: u64 = 2;

/// The store's own record, outside every hash tag.
pub const META_KEY: &str = "tg:meta";

/// Reads of `tg:meta` one refresh may take (a create, a migration or a
/// confirmation each read it again) before it gives up.
const META_READS: usize = 4;

/// The pause before the read that confirms `tg:meta` missing: long against
/// a round trip to Redis, short against a call's timeout.
const CONFIRM_MISSING_AFTER: Duration = Duration::from_millis(100);

/// Times a reserve asks again after marking its tag, before it gives up on
/// a mark that keeps moving.
pub(super) const MARK_ATTEMPTS: usize = 3;

/// An epoch as `tg:meta` holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Epoch {
    pub id: Arc<str>,
    /// Redis's clock when the epoch began (ms).
    pub created_ms: i64,
}

/// `tg:meta` as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    /// 0 when the field is absent.
    pub layout: u64,
    /// `None` only on layout 0, which the migration gives an epoch.
    pub epoch: Option<Epoch>,
    pub accepted: bool,
}

impl Meta {
    /// Reads `tg:meta`'s fields from a flat name/value list.
    pub fn parse(fields: &[String]) -> Result<Meta, StoreError> {
        let unreadable = |what: &str| StoreError::Unavailable(format!("{META_KEY}: {what}"));
        let mut meta = Meta {
            layout: 0,
            epoch: None,
            accepted: false,
        };
        let mut id = None;
        let mut created_ms = 0;
        for pair in fields.chunks_exact(2) {
            let value = pair[1].as_str();
            match pair[0].as_str() {
                "layout" => {
                    meta.layout = value
                        .parse()
                        .map_err(|_| unreadable("the layout is not an integer"))?;
                }
                "epoch" => id = Some(Arc::<str>::from(value)),
                "created_at" => {
                    created_ms = value
                        .parse()
                        .map_err(|_| unreadable("created_at is not an integer"))?;
                }
                "accepted_at" => meta.accepted = true,
                _ => {}
            }
        }
        meta.epoch = id.map(|id| Epoch { id, created_ms });
        if meta.layout > 0 && meta.epoch.is_none() {
            return Err(unreadable("no epoch"));
        }
        Ok(meta)
    }
}

// === What a store makes of tg:meta ===

/// A store's view of the epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum View {
    /// `tg:meta` not read yet.
    #[default]
    Unknown,
    /// Serving under this epoch.
    Serving(Epoch),
    /// The epoch this store served under vanished: failed closed.
    Lost(Epoch),
    /// `tg:meta` names a layout newer than [`LAYOUT`]: failed closed.
    /// `saw` is the epoch served under before, if any.
    Refused { found: u64, saw: Option<Epoch> },
}

impl View {
    /// The epoch this store last served under.
    fn saw(&self) -> Option<&Epoch> {
        match self {
            View::Unknown => None,
            View::Serving(epoch) | View::Lost(epoch) => Some(epoch),
            View::Refused { saw, .. } => saw.as_ref(),
        }
    }
}

/// Which read of `tg:meta` a refresh is looking at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reading {
    /// Every read but a confirming one.
    First,
    /// The read asked for by [`Step::ConfirmMissing`].
    Confirming,
}

/// What to do on reading `tg:meta` (`None`: missing) in view `view`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Create,
    Migrate {
        from: u64,
    },
    /// Read `tg:meta` again, after [`CONFIRM_MISSING_AFTER`], as
    /// [`Reading::Confirming`]: one empty read does not lose an epoch.
    ConfirmMissing,
    /// The next view: `Serving`, `Lost` or `Refused`.
    Become(View),
}

pub(super) fn step(view: &View, meta: Option<&Meta>, reading: Reading) -> Step {
    let Some(meta) = meta else {
        return match view.saw() {
            None => Step::Create,
            // Missing twice, or lost already: nothing left to confirm.
            Some(saw) if reading == Reading::Confirming || matches!(view, View::Lost(_)) => {
                Step::Become(View::Lost(saw.clone()))
            }
            Some(_) => Step::ConfirmMissing,
        };
    };
    if meta.layout > LAYOUT {
        return Step::Become(View::Refused {
            found: meta.layout,
            saw: view.saw().cloned(),
        });
    }
    let Some(epoch) = meta.epoch.as_ref().filter(|_| meta.layout == LAYOUT) else {
        return Step::Migrate { from: meta.layout };
    };
    let Some(saw) = view.saw() else {
        return Step::Become(View::Serving(epoch.clone()));
    };
    let next = if epoch.id == saw.id {
        match view {
            // Back from a refusal, under the same epoch.
            View::Serving(_) | View::Refused { .. } => View::Serving(epoch.clone()),
            // Only an operator's accept puts a lost store back in service.
            _ => View::Lost(saw.clone()),
        }
    } else if meta.accepted && epoch.created_ms >= saw.created_ms {
        View::Serving(epoch.clone())
    } else {
        View::Lost(saw.clone())
    };
    Step::Become(next)
}

/// Why a store that is not serving refuses calls.
fn closed_error(view: &View) -> StoreError {
    match view {
        View::Lost(epoch) => StoreError::Unavailable(format!(
            "the Redis store epoch {} vanished (Redis restarted without its data?); \
             calls fail closed until `tollgate admin store accept-epoch`",
            epoch.id
        )),
        View::Refused { found, .. } => StoreError::Unavailable(format!(
            "the Redis layout {found} is newer than this binary's {LAYOUT}"
        )),
        View::Unknown | View::Serving(_) => {
            StoreError::Unavailable(format!("{META_KEY} has not been read yet"))
        }
    }
}

/// A store's view, shared by its clones.
#[derive(Default)]
pub(super) struct EpochWatch {
    view: Mutex<View>,
}

impl EpochWatch {
    fn view(&self) -> MutexGuard<'_, View> {
        // Nothing panics while the lock is held (no await either, hence a
        // std mutex); a poisoned lock still holds a usable view.
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch to reserve under, when serving.
    pub fn serving(&self) -> Option<Arc<str>> {
        match &*self.view() {
            View::Serving(epoch) => Some(epoch.id.clone()),
            _ => None,
        }
    }

    /// Whether the store fails closed for a lost epoch or a newer layout.
    pub fn failed_closed(&self) -> bool {
        matches!(&*self.view(), View::Lost(_) | View::Refused { .. })
    }

    /// The refusal of a layout newer than this binary's, if so: then no
    /// script runs at all, settles included.
    pub fn refusal(&self) -> Option<StoreError> {
        let view = self.view();
        matches!(&*view, View::Refused { .. }).then(|| closed_error(&view))
    }

    /// Applies what `meta` says to the view, logging a change of state
    /// once: the epoch to serve under, what to do to `tg:meta` first, or
    /// why the store is closed.
    fn observe(&self, meta: Option<&Meta>, reading: Reading) -> Result<Next, StoreError> {
        let mut view = self.view();
        let next = match step(&view, meta, reading) {
            Step::Become(next) => next,
            Step::Create => return Ok(Next::Create),
            Step::Migrate { from } => return Ok(Next::Migrate { from }),
            Step::ConfirmMissing => return Ok(Next::ConfirmMissing),
        };
        if next != *view {
            log_change(&view, &next);
            *view = next;
        }
        match &*view {
            View::Serving(epoch) => Ok(Next::Serve(epoch.id.clone())),
            closed => Err(closed_error(closed)),
        }
    }
}

/// What [`EpochWatch::observe`] leaves to its caller.
enum Next {
    Serve(Arc<str>),
    Create,
    Migrate { from: u64 },
    ConfirmMissing,
}

fn log_change(from: &View, to: &View) {
    match (from, to) {
        (View::Lost(_), View::Lost(_)) | (View::Refused { .. }, View::Refused { .. }) => {}
        (_, View::Lost(epoch)) => tracing::error!(
            epoch = %epoch.id,
            "the Redis store epoch {} vanished: Redis restarted without its data? \
             Every call fails closed (503) until `tollgate admin store accept-epoch` \
             puts the store back in service",
            epoch.id
        ),
        (_, View::Refused { found, .. }) => tracing::error!(
            "the Redis layout {found} is newer than this binary's {LAYOUT}: \
             the store stays unavailable (503); run a newer tollgate"
        ),
        (View::Unknown, View::Serving(epoch)) => {
            tracing::info!(epoch = %epoch.id, layout = LAYOUT, "Redis store epoch");
        }
        (View::Serving(old) | View::Lost(old), View::Serving(new)) if old.id != new.id => {
            tracing::warn!(
                from = %old.id,
                to = %new.id,
                "serving under the Redis store epoch an operator accepted"
            );
        }
        _ => tracing::info!("the Redis store is back in service"),
    }
}

// === The store's side ===

impl RedisStore {
    /// The epoch to reserve under: the one this store serves under, or
    /// what `tg:meta` says now.
    pub(super) async fn epoch(&self) -> Result<Arc<str>, StoreError> {
        match self.inner.epoch.serving() {
            Some(epoch) => Ok(epoch),
            None => self.refresh_epoch(self.inner.policy).await,
        }
    }

    /// Whether the store fails closed: its epoch vanished, or its layout
    /// is newer than this binary's.
    pub fn failed_closed(&self) -> bool {
        self.inner.epoch.failed_closed()
    }

    /// Reads `tg:meta` and brings this store's view up to date (creating
    /// or migrating `tg:meta` as [`step`] says); the epoch to serve under,
    /// or why the store is closed.
    pub(super) async fn refresh_epoch(&self, policy: CallPolicy) -> Result<Arc<str>, StoreError> {
        let (mut meta, mut reading) = (self.read_meta(policy).await?, Reading::First);
        for _ in 0..META_READS {
            (meta, reading) = match self.inner.epoch.observe(meta.as_ref(), reading)? {
                Next::Serve(epoch) => return Ok(epoch),
                Next::Create => (Some(self.create_meta(policy).await?), Reading::First),
                Next::Migrate { from } => {
                    self.migrate(policy, from).await?;
                    (self.read_meta(policy).await?, Reading::First)
                }
                Next::ConfirmMissing => {
                    tokio::time::sleep(CONFIRM_MISSING_AFTER).await;
                    (self.read_meta(policy).await?, Reading::Confirming)
                }
            };
        }
        Err(StoreError::Unavailable(format!(
            "{META_KEY} changed under every attempt to read it"
        )))
    }

    /// After `reserve.lua` found the tag's books unmarked (`mark` is
    /// `None`) or marked with another epoch: marks them with the epoch
    /// `tg:meta` holds, if the store still serves under one, and reads
    /// `tg:meta` again, so books that vanished meanwhile are noticed.
    /// Returns the epoch to ask again under.
    pub(super) async fn mark_tag(
        &self,
        keys: &TagKeys,
        mark: Option<&str>,
    ) -> Result<Arc<str>, StoreError> {
        let policy = self.inner.policy;
        let epoch = self.refresh_epoch(policy).await?;
        if mark == Some(&*epoch) {
            // Marked under the epoch this store has just adopted.
            return Ok(epoch);
        }
        let args = [&*epoch, mark.unwrap_or_default()];
        // Marked, or moved by another caller: either way the reserve asks
        // again.
        self.run_bare(
            policy,
            &self.inner.scripts.mark_epoch,
            "mark a tag's epoch",
            keys.spend(),
            &args,
        )
        .await?;
        self.refresh_epoch(policy).await
    }

    /// `tg:meta`, or `None` when it is missing.
    async fn read_meta(&self, policy: CallPolicy) -> Result<Option<Meta>, StoreError> {
        let mut hgetall = ::redis::cmd("HGETALL");
        hgetall.arg(META_KEY);
        let fields: Vec<String> = self
            .inner
            .connection
            .call(policy, "read tg:meta", Request::Command(&hgetall))
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        Meta::parse(&fields).map(Some)
    }

    /// Creates `tg:meta` with a fresh epoch unless another store just did;
    /// either way, what it holds now.
    async fn create_meta(&self, policy: CallPolicy) -> Result<Meta, StoreError> {
        let fresh = fresh_epoch();
        let layout = LAYOUT.to_string();
        let reply = self
            .run_bare(
                policy,
                &self.inner.scripts.meta,
                "create tg:meta",
                META_KEY,
                &[&fresh, &layout],
            )
            .await?;
        let meta = Meta::parse(reply.get(1..).unwrap_or_default())?;
        if reply.first().map(String::as_str) == Some("1") {
            tracing::info!(epoch = %fresh, "created {META_KEY}: a new Redis store epoch");
        }
        Ok(meta)
    }

    /// Brings `tg:meta` (and whatever else a layout changes) from layout
    /// `from` up to [`LAYOUT`], one step at a time. Each step is a script
    /// that checks the layout it starts from and is idempotent, so
    /// gateways starting together may both run it. A new layout adds its
    /// step here, and bumps [`LAYOUT`].
    pub(super) async fn migrate(&self, policy: CallPolicy, from: u64) -> Result<(), StoreError> {
        for layout in from..LAYOUT {
            match layout {
                0 => {
                    let fresh = fresh_epoch();
                    self.run_bare(
                        policy,
                        &self.inner.scripts.migrate_layout_1,
                        "migrate tg:meta to layout 1",
                        META_KEY,
                        &[&fresh],
                    )
                    .await?;
                }
                1 => {
                    self.run_bare(
                        policy,
                        &self.inner.scripts.migrate_layout_2,
                        "migrate tg:meta to layout 2",
                        META_KEY,
                        &[],
                    )
                    .await?;
                }
                _ => {
                    return Err(StoreError::Unavailable(format!(
                        "no migration from the Redis layout {layout}"
                    )))
                }
            }
            tracing::info!(
                "migrated the Redis store from layout {layout} to {}",
                layout + 1
            );
        }
        Ok(())
    }

    /// Starts a fresh epoch, marked accepted (`lua/accept_epoch.lua`):
    /// gateways failed closed for a lost epoch adopt it within a second.
    /// Migrates an older layout first; refuses a newer one.
    pub async fn accept_epoch(&self) -> Result<AcceptedEpoch, StoreError> {
        let policy = self.inner.policy;
        for _ in 0..META_READS {
            let fresh = fresh_epoch();
            let layout = LAYOUT.to_string();
            let reply = self
                .run_bare(
                    policy,
                    &self.inner.scripts.accept_epoch,
                    "accept an epoch",
                    META_KEY,
                    &[&fresh, &layout],
                )
                .await?;
            let bad = || {
                StoreError::Unavailable(format!(
                    "unexpected reply from accept_epoch.lua: {reply:?}"
                ))
            };
            match reply.first().map(String::as_str) {
                Some("accepted") => {
                    let previous = reply.get(1).ok_or_else(bad)?;
                    let at_ms = reply
                        .get(2)
                        .and_then(|at| at.parse().ok())
                        .ok_or_else(bad)?;
                    return Ok(AcceptedEpoch {
                        endpoint: self.endpoint().to_owned(),
                        epoch: fresh,
                        previous: (!previous.is_empty()).then(|| previous.clone()),
                        at: store_time(at_ms)?,
                    });
                }
                Some("layout") => {
                    let found: u64 = reply
                        .get(1)
                        .and_then(|found| found.parse().ok())
                        .ok_or_else(bad)?;
                    if found > LAYOUT {
                        return Err(closed_error(&View::Refused { found, saw: None }));
                    }
                    self.migrate(policy, found).await?;
                }
                _ => return Err(bad()),
            }
        }
        Err(StoreError::Unavailable(format!(
            "{META_KEY} changed under every attempt to accept an epoch"
        )))
    }

    /// Runs one of the scripts that take no clock offset and no tag's five
    /// keys, but the single key `key`.
    async fn run_bare(
        &self,
        policy: CallPolicy,
        script: &Script,
        what: &'static str,
        key: &str,
        args: &[&str],
    ) -> Result<Vec<String>, StoreError> {
        let mut invocation = script.prepare_invoke();
        invocation.key(key);
        for arg in args {
            invocation.arg(*arg);
        }
        self.inner
            .connection
            .call(policy, what, Request::Script(&invocation))
            .await
    }
}

fn fresh_epoch() -> String {
    uuid::Uuid::now_v7().to_string()
}

mod accept;

pub use accept::{accept_epoch, AcceptedEpoch};

#[cfg(test)]
mod tests;
