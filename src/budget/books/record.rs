//! A call's reservation record as the booking rules read and write it:
//! from its reserve until it is forgotten, a retry horizon after it
//! closed. Times are Unix milliseconds on the store's clock.

use chrono::{DateTime, TimeZone, Utc};

use crate::budget::{run_id_of, Denial, Meter, OpenHold, ScopeKind, SettleOutcome, Settlement};
use crate::money::UsdMicros;

#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub state: RecordState,
    pub amount: UsdMicros,
    pub key: Charge,
    pub org: Option<Charge>,
    pub run: Option<Charge>,
    /// The call's other caps (model groups, rate limits), in the order
    /// the request named them.
    pub caps: Vec<Charge>,
    /// The token bound a `tokens` cap holds (0 without one).
    pub tokens: u64,
    /// The customer the call was for (its id, without its key).
    pub customer: Option<String>,
    pub started_at: i64,
    pub deadline: i64,
    pub ttl_ms: i64,
    /// Set once closed: when the record may be forgotten.
    pub forget_at: Option<i64>,
    /// The idempotency claim the reservation holds while it is open.
    pub claim: Option<String>,
    /// The model the call was for, so an expiry with no settle still books
    /// its charge against it; empty for a record kept by a version that
    /// did not keep it.
    pub model: String,
}

#[derive(Clone, Debug)]
pub(crate) enum RecordState {
    /// Remembered so a retried reserve gets the same denial.
    Denied(Denial),
    Open,
    /// Past its deadline unsettled, with what its expiry charged (its
    /// amount, or 0 under `on_expiry = "release"`), which a late settle
    /// corrects to the actual cost.
    Expired(UsdMicros),
    /// Settled, with the first answer, which a retry gets back.
    Settled(SettleOutcome),
}

/// A scope charged by a reservation, in the period current at reserve
/// time: the settle lands in that period even after a rollover.
#[derive(Clone, Debug)]
pub(crate) struct Charge {
    pub kind: ScopeKind,
    pub id: String,
    /// Money for the key, org and run; any for the other caps.
    pub meter: Meter,
    /// The period's own id; the counter's is [`Charge::counter_period`].
    pub period_id: String,
    /// The cap at reserve time, so a settle can report what is left
    /// without being told the scope again (a run's is read where it is
    /// checked, at reserve).
    pub cap: u64,
}

impl Charge {
    /// A money charge of the key, org or run.
    pub(crate) fn usd(kind: ScopeKind, id: String, period_id: String, cap: UsdMicros) -> Charge {
        Charge {
            kind,
            id,
            meter: Meter::Usd,
            period_id,
            cap,
        }
    }

    /// The period id its counter is kept under.
    pub(crate) fn counter_period(&self) -> std::borrow::Cow<'_, str> {
        self.meter.counter_period(&self.period_id)
    }
}

impl Record {
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.state, RecordState::Open)
    }

    /// The money charges of the key, its org and its run, the key's first.
    pub(crate) fn charges(&self) -> impl Iterator<Item = &Charge> {
        std::iter::once(&self.key)
            .chain(self.org.as_ref())
            .chain(self.run.as_ref())
    }

    /// Every counter the reservation holds headroom in: the key's, org's
    /// and run's money, then its other caps.
    pub(crate) fn all_charges(&self) -> impl Iterator<Item = &Charge> {
        self.charges().chain(&self.caps)
    }

    /// What the reservation holds of `charge`'s meter.
    pub(crate) fn held(&self, charge: &Charge) -> u64 {
        charge.meter.held(self.amount, self.tokens)
    }

    /// The run id the client named, without its key.
    pub(crate) fn run_id(&self) -> Option<String> {
        self.run.as_ref().map(|run| run_id_of(&run.id).to_owned())
    }

    pub(crate) fn is_owned_by(&self, settlement: &Settlement) -> bool {
        self.key.id == settlement.key
            && self.org.as_ref().map(|org| org.id.as_str()) == settlement.org.as_deref()
    }

    /// The reservation as the admin API lists it.
    pub(crate) fn hold(&self, exec_id: &str) -> OpenHold {
        OpenHold {
            exec_id: exec_id.to_owned(),
            key: self.key.id.clone(),
            org: self.org.as_ref().map(|org| org.id.clone()),
            run: self.run_id(),
            model: self.model.clone(),
            amount: self.amount,
            started_at: from_millis(self.started_at),
            deadline: from_millis(self.deadline),
        }
    }
}

pub(crate) fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

pub(crate) fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
