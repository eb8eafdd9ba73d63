//! Spend aggregates: per UTC day, key, run, customer and model, what the ledger entries
//! of that day added up to, kept by every store in the same atomic step
//! as the counters and the ledger entry itself. A spend report reads these
//! rows, never the raw ledger, which is folded away after its retention;
//! the rows themselves are kept `store.aggregate_retention_days`.
//!
//! Each ledger entry adds to one row, the one of its day (the store's
//! clock when it was written), key, run (none for a call outside a run),
//! customer (none for a call that named none) and model:
//!
//! - `calls` +1 for a settle on time and for an expiry, +0 for a late
//!   settle (its call was counted when it expired);
//! - the token counts of the entry's usage (an expiry has none);
//! - `cost_usd_micros` += the entry's `actual`, signed: a late settle that
//!   cost less than its expiry charged gives the difference back.
//!
//! So Σ `cost_usd_micros` over every row equals Σ `actual` over every
//! ledger entry ever written, folded or not (while the rows are kept).
//!
//! An expiry's model is the one its reservation was made for, kept in the
//! reservation record; `""` for a record written by a version that did
//! not keep it.

use chrono::{DateTime, Days, NaiveDate, Utc};

use super::{LedgerEntry, LedgerStatus};

/// How long aggregate rows are kept when the config does not say.
pub const DEFAULT_AGGREGATE_RETENTION_DAYS: u32 = 400;

/// Which rows a spend report wants. Every bound is inclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendQuery {
    pub from: NaiveDate,
    /// Inclusive.
    pub to: NaiveDate,
    pub key: Option<String>,
    pub org: Option<String>,
}

/// One aggregate row: a day, a key, a run, a customer and a model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpendRow {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub key: String,
    /// The key's org; fixed for a key, so one per row.
    pub org: Option<String>,
    /// The run id the client named (`x-tollgate-run`); `""` outside a run.
    pub run: String,
    /// The customer the calls were for (`x-tollgate-customer`, or the
    /// body's end-user field); `""` for calls that named none.
    pub customer: String,
    /// `""` for adjustments, and for expiries of reservations recorded
    /// without a model (see the module docs).
    pub model: String,
    pub calls: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    /// Σ ledger `actual`: signed, as a late settle may give some back.
    pub cost_usd_micros: i64,
}

impl SpendQuery {
    /// Whether a row of `day` (`YYYY-MM-DD`), `key` and `org` is wanted.
    /// Day ids sort as text in date order, so the range is a text range.
    pub fn matches(&self, day: &str, key: &str, org: Option<&str>) -> bool {
        let within = day_id(self.from).as_str() <= day && day <= day_id(self.to).as_str();
        within
            && self.key.as_deref().is_none_or(|wanted| wanted == key)
            && self.org.as_deref().is_none_or(|wanted| Some(wanted) == org)
    }
}

impl SpendRow {
    /// An empty row for `entry`'s day, key, org and model.
    pub fn for_entry(entry: &LedgerEntry) -> Self {
        SpendRow {
            day: day_of(entry.at),
            key: entry.key.clone(),
            org: entry.org.clone(),
            run: entry.run.clone().unwrap_or_default(),
            customer: entry.customer.clone().unwrap_or_default(),
            model: entry.model.clone(),
            ..SpendRow::default()
        }
    }

    /// Adds one ledger entry to the row.
    pub fn add(&mut self, entry: &LedgerEntry) {
        self.calls = self.calls.saturating_add(calls_of(entry.status));
        self.input_tokens = self.input_tokens.saturating_add(entry.usage.input);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(entry.usage.cached_input);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(entry.usage.cache_write);
        self.output_tokens = self.output_tokens.saturating_add(entry.usage.output);
        self.cost_usd_micros = self.cost_usd_micros.saturating_add(entry.actual);
    }

    /// Adds another row's sums (of the same day, key, run, customer and
    /// model).
    pub fn merge(&mut self, other: &SpendRow) {
        self.calls = self.calls.saturating_add(other.calls);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost_usd_micros = self.cost_usd_micros.saturating_add(other.cost_usd_micros);
    }

    /// The order rows are reported in.
    pub fn sort_key(&self) -> (&str, &str, &str, &str, &str) {
        (&self.day, &self.key, &self.run, &self.customer, &self.model)
    }
}

/// How many calls an entry of `status` counts: a late settle's call was
/// counted when it expired. Written as a match so a new status has to say.
pub fn calls_of(status: LedgerStatus) -> u64 {
    match status {
        LedgerStatus::Ok | LedgerStatus::Overrun | LedgerStatus::Estimated => 1,
        LedgerStatus::Expired => 1,
        // A late settle's call was counted at its expiry; an adjustment
        // is money moved by hand, not a call.
        LedgerStatus::Late | LedgerStatus::Adjustment => 0,
    }
}

/// The row day of an entry written at `at`: its UTC date, `YYYY-MM-DD`.
pub fn day_of(at: DateTime<Utc>) -> String {
    day_id(at.date_naive())
}

pub fn day_id(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// The first day still kept at `now` under a retention of `days`: rows of
/// earlier days are deleted by the sweep.
pub fn first_kept_day(now: DateTime<Utc>, days: u32) -> String {
    let today = now.date_naive();
    day_id(
        today
            .checked_sub_days(Days::new(u64::from(days)))
            .unwrap_or(NaiveDate::MIN),
    )
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn a_day_is_the_utc_date_and_the_first_kept_day_counts_back_whole_days() {
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 23, 59, 59).unwrap();
        assert_eq!(day_of(at), "2026-11-29");
        assert_eq!(first_kept_day(at, 400), "2025-10-25");
        assert_eq!(first_kept_day(at, 1), "2026-11-28");
    }

    #[test]
    fn a_query_matches_its_inclusive_day_range_key_and_org() {
        let query = SpendQuery {
            from: NaiveDate::from_ymd_opt(2026, 11, 1).unwrap(),
            to: NaiveDate::from_ymd_opt(2026, 11, 30).unwrap(),
            key: None,
            org: Some("acme".to_owned()),
        };
        assert!(query.matches("2026-11-01", "alice", Some("acme")));
        assert!(query.matches("2026-11-30", "alice", Some("acme")));
        assert!(!query.matches("2026-12-01", "alice", Some("acme")));
        assert!(!query.matches("2026-10-31", "alice", Some("acme")));
        assert!(!query.matches("2026-11-15", "bob", None));
        let by_key = SpendQuery {
            key: Some("bob".to_owned()),
            org: None,
            ..query
        };
        assert!(by_key.matches("2026-11-15", "bob", None));
        assert!(!by_key.matches("2026-11-15", "alice", Some("acme")));
    }

    #[test]
    fn a_late_settle_adds_its_cost_but_no_call() {
        assert_eq!(calls_of(LedgerStatus::Late), 0);
        assert_eq!(calls_of(LedgerStatus::Expired), 1);
        assert_eq!(calls_of(LedgerStatus::Overrun), 1);
    }
}
