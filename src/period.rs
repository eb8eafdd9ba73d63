//! Budget periods: which UTC calendar window a charge falls into, its id in
//! the counters, and when the next window starts.
//!
//! A period id names the window a counter belongs to (`2026-11-29` for a day
//! cap), so a cap "resets" simply because a new id starts a fresh counter;
//! nothing ever has to be zeroed. Weeks are ISO weeks (Monday first, ISO
//! year), so `2027-01-01` is in `2026-W53`.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, Timelike, Utc};

/// How long a cap lasts before it starts again from zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    /// A calendar minute: the window of a rate limit (`rpm`, `tpm`).
    Minute,
    Hour,
    Day,
    Week,
    Month,
    /// Never resets: a lifetime budget.
    Total,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown period {0:?}: expected one of minute, hour, day, week, month, total")]
pub struct UnknownPeriod(pub String);

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Minute => "minute",
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Total => "total",
        }
    }

    /// The id of the window containing `now`: `2026-11-29T1942` (ISO 8601's
    /// basic form for the minute: a counter's field on Redis is split at
    /// `:`), `2026-11-29T19`, `2026-11-29`, `2026-W48`, `2026-11` or
    /// `total`.
    pub fn id_at(self, now: DateTime<Utc>) -> String {
        match self {
            Period::Minute => format!(
                "{:04}-{:02}-{:02}T{:02}{:02}",
                now.year(),
                now.month(),
                now.day(),
                now.hour(),
                now.minute()
            ),
            Period::Hour => format!(
                "{:04}-{:02}-{:02}T{:02}",
                now.year(),
                now.month(),
                now.day(),
                now.hour()
            ),
            Period::Day => format!("{:04}-{:02}-{:02}", now.year(), now.month(), now.day()),
            Period::Week => {
                let week = now.iso_week();
                format!("{:04}-W{:02}", week.year(), week.week())
            }
            Period::Month => format!("{:04}-{:02}", now.year(), now.month()),
            Period::Total => "total".to_owned(),
        }
    }

    /// The first instant of the window after the one containing `now`;
    /// `None` for `total`, which never resets (and, harmlessly, at the end of
    /// chrono's calendar, where no next window exists).
    pub fn resets_at(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let today = now.date_naive();
        let next_start = match self {
            Period::Minute => {
                let minute_start = today.and_hms_opt(now.hour(), now.minute(), 0)?;
                return minute_start
                    .checked_add_signed(TimeDelta::minutes(1))
                    .map(|t| t.and_utc());
            }
            Period::Hour => {
                let hour_start = today.and_hms_opt(now.hour(), 0, 0)?;
                return hour_start
                    .checked_add_signed(TimeDelta::hours(1))
                    .map(|t| t.and_utc());
            }
            Period::Day => today.succ_opt()?,
            Period::Week => {
                let days_left = 7 - i64::from(today.weekday().num_days_from_monday());
                today.checked_add_signed(TimeDelta::days(days_left))?
            }
            Period::Month => match today.month() {
                12 => NaiveDate::from_ymd_opt(today.year().checked_add(1)?, 1, 1)?,
                month => NaiveDate::from_ymd_opt(today.year(), month + 1, 1)?,
            },
            Period::Total => return None,
        };
        next_start.and_hms_opt(0, 0, 0).map(|t| t.and_utc())
    }
}

impl FromStr for Period {
    type Err = UnknownPeriod;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "minute" => Ok(Period::Minute),
            "hour" => Ok(Period::Hour),
            "day" => Ok(Period::Day),
            "week" => Ok(Period::Week),
            "month" => Ok(Period::Month),
            "total" => Ok(Period::Total),
            other => Err(UnknownPeriod(other.to_owned())),
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn ids_name_the_window() {
        let now = at("2026-11-29T19:42:07Z");
        assert_eq!(Period::Minute.id_at(now), "2026-11-29T1942");
        assert_eq!(Period::Hour.id_at(now), "2026-11-29T19");
        assert_eq!(Period::Day.id_at(now), "2026-11-29");
        assert_eq!(Period::Week.id_at(now), "2026-W48");
        assert_eq!(Period::Month.id_at(now), "2026-11");
        assert_eq!(Period::Total.id_at(now), "total");
    }

    #[test]
    fn last_second_and_first_second_are_different_windows() {
        let last = at("2026-11-30T23:59:59Z");
        let first = at("2026-12-01T00:00:00Z");
        assert_eq!(Period::Hour.id_at(last), "2026-11-30T23");
        assert_eq!(Period::Hour.id_at(first), "2026-12-01T00");
        assert_eq!(Period::Day.id_at(last), "2026-11-30");
        assert_eq!(Period::Day.id_at(first), "2026-12-01");
        assert_eq!(Period::Month.id_at(last), "2026-11");
        assert_eq!(Period::Month.id_at(first), "2026-12");
        // 2026-11-30 is a Monday: its last second and the previous Sunday's
        // are in different weeks.
        assert_eq!(Period::Week.id_at(at("2026-11-29T23:59:59Z")), "2026-W48");
        assert_eq!(Period::Week.id_at(at("2026-11-30T00:00:00Z")), "2026-W49");
        assert_eq!(Period::Total.id_at(last), Period::Total.id_at(first));
    }

    #[test]
    fn iso_weeks_at_year_edges() {
        assert_eq!(Period::Week.id_at(at("2026-12-31T12:00:00Z")), "2026-W53");
        assert_eq!(Period::Week.id_at(at("2027-01-01T00:00:00Z")), "2026-W53");
        assert_eq!(Period::Week.id_at(at("2027-01-04T00:00:00Z")), "2027-W01");
        assert_eq!(Period::Week.id_at(at("2024-12-30T00:00:00Z")), "2025-W01");
        assert_eq!(Period::Week.id_at(at("2024-12-29T23:59:59Z")), "2024-W52");
    }

    #[test]
    fn month_rolls_over_into_january() {
        assert_eq!(Period::Month.id_at(at("2026-12-31T23:59:59Z")), "2026-12");
        assert_eq!(Period::Month.id_at(at("2027-01-01T00:00:00Z")), "2027-01");
        assert_eq!(
            Period::Month.resets_at(at("2026-12-15T08:00:00Z")),
            Some(at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn resets_at_the_start_of_the_next_window() {
        let now = at("2026-11-29T19:42:07Z"); // a Sunday
        assert_eq!(
            Period::Minute.resets_at(now),
            Some(at("2026-11-29T19:43:00Z"))
        );
        assert_eq!(
            Period::Minute.resets_at(at("2026-12-31T23:59:59Z")),
            Some(at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            Period::Hour.resets_at(now),
            Some(at("2026-11-29T20:00:00Z"))
        );
        assert_eq!(Period::Day.resets_at(now), Some(at("2026-11-30T00:00:00Z")));
        assert_eq!(
            Period::Week.resets_at(now),
            Some(at("2026-11-30T00:00:00Z"))
        );
        assert_eq!(
            Period::Month.resets_at(now),
            Some(at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(Period::Total.resets_at(now), None);

        // At the very first instant of a window the reset is a whole window away.
        let monday = at("2026-11-30T00:00:00Z");
        assert_eq!(
            Period::Week.resets_at(monday),
            Some(at("2026-12-07T00:00:00Z"))
        );
        assert_eq!(
            Period::Day.resets_at(monday),
            Some(at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(
            Period::Hour.resets_at(at("2026-12-31T23:59:59Z")),
            Some(at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            Period::Month.resets_at(at("2028-02-29T10:00:00Z")),
            Some(at("2028-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn resets_at_starts_the_next_id() {
        let now = at("2026-12-31T23:15:00Z");
        for period in [Period::Hour, Period::Day, Period::Week, Period::Month] {
            let next = period.resets_at(now).unwrap();
            let before = next - TimeDelta::seconds(1);
            assert_eq!(period.id_at(before), period.id_at(now), "{period}");
            assert_ne!(period.id_at(next), period.id_at(now), "{period}");
        }
    }

    #[test]
    fn parses_and_displays() {
        for period in [
            Period::Hour,
            Period::Day,
            Period::Week,
            Period::Month,
            Period::Total,
        ] {
            assert_eq!(period.to_string().parse::<Period>(), Ok(period));
        }
        let err = "daily".parse::<Period>().unwrap_err().to_string();
        assert!(err.contains("\"daily\""), "{err}");
        assert!(err.contains("hour, day, week, month, total"), "{err}");
    }
}
