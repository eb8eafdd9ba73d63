//! Caps beyond a key's, its org's and its run's money: model groups and
//! rate limits, each a scope, a meter, a period and a limit, reserved and
//! settled in the same atomic step as the key's own cap.
//!
//! The key's and org's money caps keep their own place in a reservation
//! (they own the call: its ledger entry, reconcile, adjustments); every
//! other cap is one [`Cap`] in [`ReserveRequest::caps`](super::ReserveRequest),
//! which the booking rules, the SQLite desk and `reserve.lua` treat alike:
//! the same check, the same hold, the same settle.
//!
//! A cap's counter is the scope's counter in the cap's period, under a
//! period id that names the meter ([`Meter::counter_period`]), so a key's
//! `rpm` and a key cap with period `minute` never share one.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::ScopeKind;
use crate::period::Period;
use crate::usage::Usage;

/// What a cap counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Meter {
    /// Money, in µUSD: a call holds its bound and settles its cost.
    Usd,
    /// Requests: a call holds 1 and keeps it, whatever it cost.
    Requests,
    /// Tokens, input and output: a call holds its token bound and settles
    /// the tokens its usage reports.
    Tokens,
}

impl Meter {
    pub fn as_str(self) -> &'static str {
        match self {
            Meter::Usd => "usd",
            Meter::Requests => "requests",
            Meter::Tokens => "tokens",
        }
    }

    pub fn parse(text: &str) -> Option<Meter> {
        match text {
            "usd" => Some(Meter::Usd),
            "requests" => Some(Meter::Requests),
            "tokens" => Some(Meter::Tokens),
            _ => None,
        }
    }

    /// The period id a counter of this meter is kept under: the period's
    /// own for money, `<period id>/<meter>` for the others.
    pub fn counter_period(self, period_id: &str) -> Cow<'_, str> {
        match self {
            Meter::Usd => Cow::Borrowed(period_id),
            meter => Cow::Owned(format!("{period_id}/{}", meter.as_str())),
        }
    }

    /// The meter a counter's period id names, and the period id itself.
    pub fn of_counter_period(counter_period: &str) -> (Meter, &str) {
        match counter_period.rsplit_once('/') {
            Some((period_id, meter)) => match Meter::parse(meter) {
                Some(meter) => (meter, period_id),
                None => (Meter::Usd, counter_period),
            },
            None => (Meter::Usd, counter_period),
        }
    }

    /// What a call holds of this meter, given what it holds in money and
    /// its token bound.
    pub fn held(self, amount: u64, tokens: u64) -> u64 {
        match self {
            Meter::Usd => amount,
            Meter::Requests => 1,
            Meter::Tokens => tokens,
        }
    }
}

impl fmt::Display for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long a rate limit's counter is kept after its minute: nothing
/// reads it once the minute is over, but a call settling just after the
/// minute turned still moves it.
const WINDOWS_KEPT_MINUTES: i64 = 2;

/// The minute id below which a rate limit's counter (`<minute>/<meter>`)
/// is forgotten, at `now`.
pub fn forget_windows_before(now: chrono::DateTime<chrono::Utc>) -> String {
    let cutoff = now - chrono::TimeDelta::minutes(WINDOWS_KEPT_MINUTES);
    crate::period::Period::Minute.id_at(cutoff)
}

/// Whether a counter's period id is that of a rate limit's minute before
/// `cutoff` (a minute id: they sort as they follow each other).
pub fn is_window_before(counter_period: &str, cutoff: &str) -> bool {
    match Meter::of_counter_period(counter_period) {
        (Meter::Usd, _) => false,
        (_, minute) => minute < cutoff,
    }
}

/// The tokens a call's usage counts against a `tpm` limit: input (cached
/// and cache writes included) and output.
pub fn tokens_of(usage: &Usage) -> u64 {
    usage
        .input
        .saturating_add(usage.cached_input)
        .saturating_add(usage.cache_write)
        .saturating_add(usage.output)
}

/// One cap a call is reserved against besides its key's, org's and run's
/// money: a model group's money, or a rate limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cap {
    pub kind: ScopeKind,
    /// The scope's id: a key's or an org's own, or a model group's
    /// [`model_scope_id`].
    pub id: String,
    pub meter: Meter,
    pub period: Period,
    /// In the meter's unit: µUSD, requests or tokens.
    pub limit: u64,
}

/// A model group's scope id: `key:<key id>/<group>` or `org:<org id>/<group>`,
/// so a key's group and an org's of the same names never share a counter.
pub fn model_scope_id(owner: ScopeKind, owner_id: &str, group: &str) -> String {
    format!("{}:{owner_id}/{group}", owner.as_str())
}

/// A customer's scope id: `<key id>/<customer id>` (a key id holds no `/`).
pub fn customer_scope_id(key_id: &str, customer: &str) -> String {
    format!("{key_id}/{customer}")
}

/// A model group's owner (its kind and id) and its name, from its scope id.
pub fn model_scope_parts(id: &str) -> Option<(ScopeKind, &str, &str)> {
    let (owner, rest) = id.split_once(':')?;
    let (owner_id, group) = rest.rsplit_once('/')?;
    Some((ScopeKind::parse(owner)?, owner_id, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_counts_under_a_period_id_of_its_own() {
        assert_eq!(Meter::Usd.counter_period("2026-12-07"), "2026-12-07");
        assert_eq!(
            Meter::Requests.counter_period("2026-12-07T1849"),
            "2026-12-07T1849/requests"
        );
        for meter in [Meter::Usd, Meter::Requests, Meter::Tokens] {
            let counter = meter.counter_period("2026-12-07T1849");
            assert_eq!(
                Meter::of_counter_period(&counter),
                (meter, "2026-12-07T1849")
            );
        }
        assert_eq!(Meter::of_counter_period("total"), (Meter::Usd, "total"));
    }

    #[test]
    fn a_model_group_id_names_its_owner() {
        let id = model_scope_id(ScopeKind::Org, "acme", "opus");
        assert_eq!(id, "org:acme/opus");
        assert_eq!(
            model_scope_parts(&id),
            Some((ScopeKind::Org, "acme", "opus"))
        );
        assert_eq!(
            model_scope_parts("key:a.b/c"),
            Some((ScopeKind::Key, "a.b", "c"))
        );
        assert_eq!(model_scope_parts("nope"), None);
    }
}
