//! The Lua scripts of `lua/` and the Rust side of their contracts: which
//! keys they get, how their arguments are written and how their replies
//! are read. Each script's header states its KEYS, ARGV, replies and
//! invariants; the scripts on common.lua read their ARGV by name, as
//! `args` declares them once, and `replies` reads what they answer.
//!
//! Every script but `snapshot.lua`, the store's own record (`meta.lua`,
//! `accept_epoch.lua`, `mark_epoch.lua`, the migrations; see `meta`) and
//! the admin API's documents (`record_write.lua`, `records.lua`; see
//! `records`) is `lua/common.lua` (the key layout, period ids, expiry and
//! booking), the binding of its named arguments, then the script's own
//! body, so the helpers exist once
//! and every script stays one atomic call.
//!
//! Tests shift the store's clock: a test build puts `lua/test/clock.lua`
//! between the two, which takes a clock offset off the end of ARGV (see
//! `RedisStore::run`). Production scripts and their arguments have no
//! offset at all.

use ::redis::Script;

mod args;
mod replies;

pub(super) use args::{
    adjust_args, drain_args, millis, reserve_args, settle_args, state_args, sweep_args,
};
use args::{AdjustArgs, DrainArgs, ReserveArgs, SettleArgs, StateArgs, SweepArgs};
pub(super) use replies::{
    adjust_reply, drain_reply, ledger_status, reserve_reply, settle_reply, state_reply, store_time,
    sweep_reply, AdjustReply, ReserveReply, SettleReply,
};

/// The eight keys of one hash tag, in the order every script takes them.
/// They share the tag `{T}`, so a cluster keeps them in one slot.
pub(super) struct TagKeys([String; 8]);

impl TagKeys {
    pub fn new(tag: &str) -> Self {
        TagKeys(
            [
                "spend", "res", "pending", "closed", "ledger", "agg", "done", "cust",
            ]
            .map(|name| format!("tg:{{{tag}}}:{name}")),
        )
    }

    pub fn all(&self) -> &[String; 8] {
        &self.0
    }

    pub fn spend(&self) -> &str {
        &self.0[0]
    }

    pub fn res(&self) -> &str {
        &self.0[1]
    }

    pub fn pending(&self) -> &str {
        &self.0[2]
    }

    pub fn ledger(&self) -> &str {
        &self.0[4]
    }

    /// The spend aggregates (`aggregates`).
    pub fn agg(&self) -> &str {
        &self.0[5]
    }

    /// The customers remembered, by id (`customers`).
    pub fn cust(&self) -> &str {
        &self.0[7]
    }
}

/// The scripts, hashed once; [`Script`] calls them with EVALSHA and loads
/// them again when Redis answers NOSCRIPT (after `SCRIPT FLUSH`, a restart
/// or a failover to a node that never saw them).
pub(super) struct Scripts {
    pub reserve: Script,
    pub settle: Script,
    pub adjust: Script,
    pub sweep: Script,
    pub drain: Script,
    pub state: Script,
    pub snapshot: Script,
    pub meta: Script,
    pub accept_epoch: Script,
    pub mark_epoch: Script,
    pub migrate_layout_1: Script,
    pub migrate_layout_2: Script,
    pub record_write: Script,
    pub records: Script,
}

/// A script on `lua/common.lua`: common.lua, then (in tests) the test
/// clock, then `chunks` (shared helpers such as `lua/fold.lua`), then the
/// binding of its ARGV to `names` ([`args::bind_argv`]), then its body: the
/// source Redis knows the script (and its SHA) by, one chunk, so the
/// body and common.lua's helpers see the same locals.
fn on_common(chunks: &[&str], names: &[&str], body: &str) -> Script {
    let mut source = String::from(COMMON);
    source.push('\n');
    #[cfg(test)]
    {
        source.push_str(TEST_CLOCK);
        source.push('\n');
    }
    for chunk in chunks {
        source.push_str(chunk);
        source.push('\n');
    }
    source.push_str(&args::bind_argv(names));
    source.push_str(body);
    Script::new(&source)
}

const FOLD: &str = include_str!("../../../lua/fold.lua");

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            reserve: on_common(&[], ReserveArgs::NAMES, RESERVE),
            settle: on_common(&[], SettleArgs::NAMES, SETTLE),
            adjust: on_common(&[], AdjustArgs::NAMES, ADJUST),
            sweep: on_common(&[FOLD], SweepArgs::NAMES, SWEEP),
            drain: on_common(&[FOLD], DrainArgs::NAMES, DRAIN),
            state: on_common(&[], StateArgs::NAMES, STATE),
            snapshot: Script::new(include_str!("../../../lua/snapshot.lua")),
            meta: Script::new(include_str!("../../../lua/meta.lua")),
            accept_epoch: Script::new(include_str!("../../../lua/accept_epoch.lua")),
            mark_epoch: Script::new(include_str!("../../../lua/mark_epoch.lua")),
            migrate_layout_1: Script::new(include_str!("../../../lua/migrate_layout_1.lua")),
            migrate_layout_2: Script::new(include_str!("../../../lua/migrate_layout_2.lua")),
            record_write: Script::new(include_str!("../../../lua/record_write.lua")),
            records: Script::new(include_str!("../../../lua/records.lua")),
        }
    }
}

impl Scripts {
    /// The SHA1 Redis knows a script by (EVALSHA's first argument, as
    /// `MONITOR` and `SCRIPT EXISTS` show it), by its file's name without
    /// `.lua`.
    pub fn sha(&self, name: &str) -> Option<&str> {
        let script = match name {
            "reserve" => &self.reserve,
            "settle" => &self.settle,
            "adjust" => &self.adjust,
            "sweep" => &self.sweep,
            "drain" => &self.drain,
            "state" => &self.state,
            "snapshot" => &self.snapshot,
            "meta" => &self.meta,
            "accept_epoch" => &self.accept_epoch,
            "mark_epoch" => &self.mark_epoch,
            "migrate_layout_1" => &self.migrate_layout_1,
            "migrate_layout_2" => &self.migrate_layout_2,
            "record_write" => &self.record_write,
            "records" => &self.records,
            _ => return None,
        };
        Some(script.get_hash())
    }
}

pub(super) const RESERVE: &str = include_str!("../../../lua/reserve.lua");
pub(super) const SETTLE: &str = include_str!("../../../lua/settle.lua");
pub(super) const ADJUST: &str = include_str!("../../../lua/adjust.lua");
pub(super) const SWEEP: &str = include_str!("../../../lua/sweep.lua");
pub(super) const DRAIN: &str = include_str!("../../../lua/drain.lua");
pub(super) const STATE: &str = include_str!("../../../lua/state.lua");

/// `common.lua` alone, the start of every script above (tests call its
/// functions directly).
pub(super) const COMMON: &str = include_str!("../../../lua/common.lua");

/// The test clock chunk (see the module doc).
#[cfg(test)]
pub(super) const TEST_CLOCK: &str = include_str!("../../../lua/test/clock.lua");
