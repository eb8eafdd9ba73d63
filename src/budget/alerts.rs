//! Spending alerts as the store keeps them: an event (a scope crossed one
//! of its thresholds, or was first refused in a period) waiting to be
//! POSTed to the operator's webhook, until the receiver takes it.
//!
//! The queue is global (one per store, not per tag) and small: an event
//! is queued at most once per id, ever within [`ALERT_ID_RETENTION`], so
//! every gateway and every retry may queue the same event and only the
//! first one counts. Delivery is at least once: `due_alerts` leases what
//! it returns (moves its due time forward), so two gateways do not both
//! send an event at once, and an event whose sender died is sent again
//! when its lease runs out.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::ScopeKind;
use crate::money::{Threshold, UsdMicros};

/// How long a delivered event's id is remembered, so that a gateway that
/// sees the same crossing later (after a restart, with its own memory of
/// what it queued gone) does not queue it again: longer than any period
/// but `total`, whose events are each one crossing for good.
pub const ALERT_ID_RETENTION: Duration = Duration::from_secs(40 * 24 * 3600);

/// What happened to a scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlertKind {
    /// Its spent + reserved reached a threshold of its cap.
    Threshold,
    /// A call was refused by its cap (a 402).
    Exhausted,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Threshold => "threshold",
            AlertKind::Exhausted => "exhausted",
        }
    }
}

/// One alert, as the webhook receives it (docs/admin.md, "Alerts").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertEvent {
    /// The same for every gateway and every retry that sees this crossing
    /// (see [`AlertEvent::new`]).
    pub id: String,
    pub kind: AlertKind,
    pub scope: ScopeKind,
    /// The scope's id in the store (a run's is `<key>/<run>`).
    pub scope_id: String,
    /// `None` for [`AlertKind::Exhausted`].
    pub threshold: Option<Threshold>,
    pub period_id: String,
    pub cap: UsdMicros,
    /// The scope's spent + reserved when the crossing was seen.
    pub spent: UsdMicros,
    pub at: DateTime<Utc>,
}

impl AlertEvent {
    /// An event whose id is derived from what makes it one crossing: the
    /// scope, the period, the kind and the threshold, never from when or
    /// where it was seen.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: AlertKind,
        scope: ScopeKind,
        scope_id: &str,
        threshold: Option<&Threshold>,
        period_id: &str,
        cap: UsdMicros,
        spent: UsdMicros,
        at: DateTime<Utc>,
    ) -> AlertEvent {
        let ppm = threshold.map_or(0, Threshold::ppm);
        let digest = Sha256::digest(format!(
            "{scope}\n{scope_id}\n{period_id}\n{}\n{ppm}",
            kind.as_str()
        ));
        AlertEvent {
            id: hex::encode(&digest[..16]),
            kind,
            scope,
            scope_id: scope_id.to_owned(),
            threshold: threshold.cloned(),
            period_id: period_id.to_owned(),
            cap,
            spent,
            at,
        }
    }

    /// The JSON body the webhook receives, as the store keeps it: the bytes
    /// signed and sent are these, whichever gateway sends them.
    pub fn body(&self) -> String {
        // A run's id as the client named it, without its key.
        let scope_id = match self.scope {
            ScopeKind::Run => self
                .scope_id
                .split_once('/')
                .map_or(self.scope_id.as_str(), |(_, run)| run),
            _ => self.scope_id.as_str(),
        };
        json!({
            "id": self.id,
            "type": self.kind.as_str(),
            "scope": self.scope.as_str(),
            "scope_id": scope_id,
            "threshold": self.threshold.as_ref().map(Threshold::as_str),
            "period_id": self.period_id,
            "cap_usd_micros": self.cap,
            "spent_usd_micros": self.spent,
            "at": self.at.to_rfc3339_opts(SecondsFormat::Secs, true),
        })
        .to_string()
    }
}

/// An event waiting for delivery, as `due_alerts` hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedAlert {
    pub id: String,
    /// The body exactly as queued.
    pub body: String,
    /// Failed deliveries so far: the next retry waits longer.
    pub attempts: u32,
}
