//! OpenAI-style `x-ratelimit-*` headers on every response of a key held
//! against a rate limit (`rpm`, `tpm`), which the SDKs read: for requests
//! and for tokens, the tightest limit among the call's caps, what it has
//! left in this minute after the call's reserve, and when it resets.

use chrono::{DateTime, Utc};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::budget::{Cap, Denial, Level, Meter};

/// The names of one meter's headers: its limit, what remains, when it
/// resets.
type Names = [HeaderName; 3];

const REQUESTS: Names = [
    HeaderName::from_static("x-ratelimit-limit-requests"),
    HeaderName::from_static("x-ratelimit-remaining-requests"),
    HeaderName::from_static("x-ratelimit-reset-requests"),
];

const TOKENS: Names = [
    HeaderName::from_static("x-ratelimit-limit-tokens"),
    HeaderName::from_static("x-ratelimit-remaining-tokens"),
    HeaderName::from_static("x-ratelimit-reset-tokens"),
];

/// One meter's tightest limit as the headers state it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    limit: u64,
    remaining: u64,
    /// Seconds until the window resets.
    reset_secs: i64,
}

/// What a call's rate limits say after its reserve.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateHeaders {
    requests: Option<Window>,
    tokens: Option<Window>,
}

impl RateHeaders {
    /// The headers of a reserved call: `levels` end with one level per
    /// cap, in the caps' order (see [`Level`]). `None` without rate
    /// limits, or for a retried reserve, which reports no levels.
    pub fn after_reserve(caps: &[Cap], levels: &[Level], now: DateTime<Utc>) -> Option<Self> {
        let first = levels.len().checked_sub(caps.len())?;
        let mut headers = RateHeaders::default();
        for (cap, level) in caps.iter().zip(&levels[first..]) {
            let window = Window {
                limit: cap.limit,
                remaining: cap.limit.saturating_sub(level.committed),
                reset_secs: reset_secs(cap.period.resets_at(now), now),
            };
            headers.tighten(cap.meter, window);
        }
        (headers != RateHeaders::default()).then_some(headers)
    }

    /// The headers of a call a rate limit refused.
    pub fn after_denial(denial: &Denial, now: DateTime<Utc>) -> Self {
        let mut headers = RateHeaders::default();
        headers.tighten(
            denial.meter,
            Window {
                limit: denial.cap,
                remaining: denial.remaining,
                reset_secs: reset_secs(denial.resets_at, now),
            },
        );
        headers
    }

    fn tighten(&mut self, meter: Meter, window: Window) {
        let slot = match meter {
            Meter::Requests => &mut self.requests,
            Meter::Tokens => &mut self.tokens,
            Meter::Usd => return,
        };
        if slot.is_none_or(|held| window.remaining < held.remaining) {
            *slot = Some(window);
        }
    }

    /// Sets the headers, over any the provider sent: the key's limits at
    /// the gateway are the ones its client meets.
    pub fn insert(&self, headers: &mut HeaderMap) {
        for (names, window) in [(REQUESTS, self.requests), (TOKENS, self.tokens)] {
            let Some(window) = window else { continue };
            let reset = format!("{}s", window.reset_secs);
            let [limit, remaining, reset_name] = names;
            headers.insert(limit, HeaderValue::from(window.limit));
            headers.insert(remaining, HeaderValue::from(window.remaining));
            if let Ok(reset) = HeaderValue::from_str(&reset) {
                headers.insert(reset_name, reset);
            }
        }
    }
}

/// Whole seconds from `now` to `at`, at least 1.
fn reset_secs(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> i64 {
    at.map_or(60, |at| {
        ((at - now).num_milliseconds() + 999)
            .div_euclid(1000)
            .max(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ScopeKind;
    use crate::period::Period;
    use chrono::TimeZone;

    fn cap(kind: ScopeKind, meter: Meter, limit: u64) -> Cap {
        Cap {
            kind,
            id: "x".into(),
            meter,
            period: Period::Minute,
            limit,
        }
    }

    fn level(meter: Meter, committed: u64) -> Level {
        Level {
            kind: ScopeKind::Key,
            meter,
            period_id: String::new(),
            committed,
        }
    }

    #[test]
    fn the_tightest_limit_of_each_meter_is_stated() {
        let now = Utc.with_ymd_and_hms(2026, 12, 7, 18, 49, 15).unwrap();
        let caps = [
            cap(ScopeKind::Model, Meter::Usd, 5_000),
            cap(ScopeKind::Model, Meter::Requests, 10),
            cap(ScopeKind::Key, Meter::Requests, 60),
            cap(ScopeKind::Key, Meter::Tokens, 200_000),
        ];
        let levels = [
            level(Meter::Usd, 1_000),
            level(Meter::Usd, 1_000),
            level(Meter::Requests, 9),
            level(Meter::Requests, 3),
            level(Meter::Tokens, 5_000),
        ];
        let headers = RateHeaders::after_reserve(&caps, &levels, now).unwrap();
        let mut map = HeaderMap::new();
        headers.insert(&mut map);
        let get = |name: &str| map.get(name).unwrap().to_str().unwrap().to_owned();
        assert_eq!(get("x-ratelimit-limit-requests"), "10");
        assert_eq!(get("x-ratelimit-remaining-requests"), "1");
        assert_eq!(get("x-ratelimit-reset-requests"), "45s");
        assert_eq!(get("x-ratelimit-limit-tokens"), "200000");
        assert_eq!(get("x-ratelimit-remaining-tokens"), "195000");
        // A retried reserve reports no levels, and a key without rate
        // limits has none to state.
        assert_eq!(RateHeaders::after_reserve(&caps, &[], now), None);
        assert_eq!(
            RateHeaders::after_reserve(&caps[..1], &levels[..2], now),
            None
        );
    }
}
