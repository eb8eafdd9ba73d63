//! Which alerts a reserve's answer shows: pure functions of the answer,
//! the thresholds and the time.

use chrono::{DateTime, Utc};

use crate::budget::alerts::{AlertEvent, AlertKind};
use crate::budget::{Denial, Level, Meter, ReserveRequest, ScopeKind};
use crate::money::Threshold;

/// A `threshold` event for every threshold each scope's level has reached
/// (runs have none). A scope with a zero cap has no fraction to reach.
pub(super) fn thresholds(
    request: &ReserveRequest,
    key_alert_at: &[Threshold],
    org_alert_at: &[Threshold],
    levels: &[Level],
    now: DateTime<Utc>,
) -> Vec<AlertEvent> {
    let mut events = Vec::new();
    // Alerts watch money; a rate limit's level is no spending.
    for level in levels.iter().filter(|level| level.meter == Meter::Usd) {
        let (scope, alert_at) = match level.kind {
            ScopeKind::Key => (&request.key, key_alert_at),
            ScopeKind::Org => match &request.org {
                Some(org) => (org, org_alert_at),
                None => continue,
            },
            ScopeKind::Run | ScopeKind::Model | ScopeKind::Customer => continue,
        };
        if scope.cap == 0 {
            continue;
        }
        for threshold in alert_at {
            if threshold.reached(level.committed, scope.cap) {
                events.push(AlertEvent::new(
                    AlertKind::Threshold,
                    level.kind,
                    &scope.id,
                    Some(threshold),
                    &level.period_id,
                    scope.cap,
                    level.committed,
                    now,
                ));
            }
        }
    }
    events
}

/// The `exhausted` event of the scope that refused a call, in its period
/// now.
pub(super) fn exhausted(denial: &Denial, now: DateTime<Utc>) -> AlertEvent {
    AlertEvent::new(
        AlertKind::Exhausted,
        denial.kind,
        &denial.id,
        None,
        &denial.period.id_at(now),
        denial.cap,
        denial.cap.saturating_sub(denial.remaining),
        now,
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeZone;

    use super::*;
    use crate::budget::{Period, Scope};

    fn request() -> ReserveRequest {
        ReserveRequest {
            caps: Vec::new(),
            tokens: 0,
            customer: None,
            exec_id: "e".to_owned(),
            key: Scope {
                kind: ScopeKind::Key,
                id: "alice".to_owned(),
                cap: 1_000_000,
                period: Period::Day,
            },
            org: Some(Scope {
                kind: ScopeKind::Org,
                id: "acme".to_owned(),
                cap: 10_000_000,
                period: Period::Month,
            }),
            run: None,
            model: "m".to_owned(),
            min_amount: 1,
            amount: 1,
            ttl: Duration::from_secs(60),
        }
    }

    fn level(kind: ScopeKind, period_id: &str, committed: u64) -> Level {
        Level {
            meter: Meter::Usd,
            kind,
            period_id: period_id.to_owned(),
            committed,
        }
    }

    #[test]
    fn each_reached_threshold_of_each_scope_is_an_event() {
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let alert_at = Threshold::parse_list(&["0.5", "0.8"]).unwrap();
        let levels = [
            level(ScopeKind::Key, "2026-11-29", 800_000),
            level(ScopeKind::Org, "2026-11", 5_000_000),
        ];
        let events = thresholds(&request(), &alert_at, &alert_at, &levels, now);
        let seen: Vec<_> = events
            .iter()
            .map(|e| (e.scope, e.threshold.as_ref().map(Threshold::as_str)))
            .collect();
        assert_eq!(
            seen,
            [
                (ScopeKind::Key, Some("0.5")),
                (ScopeKind::Key, Some("0.8")),
                (ScopeKind::Org, Some("0.5")),
            ]
        );
        // Seen later, elsewhere, the same crossing has the same id.
        let later = thresholds(
            &request(),
            &alert_at,
            &[],
            &[level(ScopeKind::Key, "2026-11-29", 999_999)],
            now + chrono::TimeDelta::hours(1),
        );
        assert_eq!(later[0].id, events[0].id);
        // Just below the threshold: nothing.
        let below = [level(ScopeKind::Key, "2026-11-29", 499_999)];
        assert!(thresholds(&request(), &alert_at, &[], &below, now).is_empty());
    }

    #[test]
    fn a_refusal_is_the_exhausted_event_of_its_scope_and_period() {
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let denial = Denial {
            meter: Meter::Usd,
            kind: ScopeKind::Run,
            id: "alice/run-1".to_owned(),
            period: Period::Total,
            cap: 2_000_000,
            remaining: 500,
            resets_at: None,
        };
        let event = exhausted(&denial, now);
        assert_eq!(event.kind, AlertKind::Exhausted);
        assert_eq!(event.spent, 1_999_500);
        let body: serde_json::Value = serde_json::from_str(&event.body()).unwrap();
        assert_eq!(body["scope"], "run");
        assert_eq!(body["scope_id"], "run-1");
        assert_eq!(body["threshold"], serde_json::Value::Null);
        assert_eq!(body["at"], "2026-11-29T12:00:00Z");
    }
}
