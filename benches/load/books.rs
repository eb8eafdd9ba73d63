//! Did the gateway settle everything? Its own books (`GET /v1/budget`)
//! against what its calls were charged: nothing may stay reserved, and the
//! key and its org must have spent exactly the sum of the charges the
//! client saw (`x-tollgate-cost-usd-micros`, or the provider-reported usage
//! of each stream at the gateway's prices).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{call_once, Target};
use crate::error::BenchError;

/// How long a gateway may take to release its last reservations after the
/// last response (a stream settles before its end, so normally no time).
const SETTLE_GRACE: Duration = Duration::from_secs(3);

/// A gateway's budget checked against what its calls were charged.
#[derive(Clone, Debug)]
pub struct SettleCheck {
    pub phase: &'static str,
    pub calls: u64,
    pub expected_spent: u64,
    pub spent: u64,
    pub reserved: u64,
}

impl SettleCheck {
    pub fn holds(&self) -> bool {
        self.reserved == 0 && self.spent == self.expected_spent
    }

    /// The check as a report's settlement section prints it, for the
    /// configuration `label`.
    pub fn line(&self, label: &str) -> String {
        format!(
            "  {label:<3} {:<14} {:>8} calls  spent {:>12} µUSD (expected {:>12})  reserved {:>6}  {}",
            self.phase,
            self.calls,
            self.spent,
            self.expected_spent,
            self.reserved,
            if self.holds() { "ok" } else { "MISMATCH" }
        )
    }
}

/// Reads the gateway's books until they balance or the grace runs out;
/// `org_only`: the calls went out with many keys of one org.
pub async fn check(
    target: &Target,
    phase: &'static str,
    calls: u64,
    charged: u64,
    org_only: bool,
) -> Result<SettleCheck, BenchError> {
    let deadline = Instant::now() + SETTLE_GRACE;
    loop {
        let (spent, reserved) = budget(target, org_only).await?;
        let check = SettleCheck {
            phase,
            calls,
            expected_spent: charged,
            spent,
            reserved,
        };
        if check.holds() || Instant::now() >= deadline {
            return Ok(check);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Spent and reserved of the calling key and its org; spent is `u64::MAX`
/// when the two disagree (every call is charged to both). `org_only`: of
/// the org alone.
async fn budget(target: &Target, org_only: bool) -> Result<(u64, u64), BenchError> {
    let reply = call_once(target.addr, target.get("/v1/budget")?).await?;
    if reply.status != 200 {
        return Err(BenchError::Status {
            what: format!("{} GET /v1/budget", target.label),
            status: reply.status,
            body: String::from_utf8_lossy(&reply.body).into_owned(),
        });
    }
    let budget: Value = serde_json::from_slice(&reply.body)
        .map_err(|e| BenchError::Invalid(format!("{} budget: {e}", target.label)))?;
    let field = |scope: &str, name: &str| budget[scope][name].as_u64().unwrap_or(u64::MAX);
    let (key_spent, org_spent) = (
        field("key", "spent_usd_micros"),
        field("org", "spent_usd_micros"),
    );
    let org_reserved = field("org", "reserved_usd_micros");
    if org_only {
        return Ok((org_spent, org_reserved));
    }
    let spent = if key_spent == org_spent {
        key_spent
    } else {
        u64::MAX
    };
    let reserved = field("key", "reserved_usd_micros").max(org_reserved);
    Ok((spent, reserved))
}
