//! Did the gateway settle everything? Its own books (`GET /v1/budget`)
//! against what its calls were charged: nothing may stay reserved, and the
//! key and its org must have spent exactly the sum of the charges the
//! client saw (`x-tollgate-cost-usd-micros`, or the provider-reported usage
//! of each stream at the gateway's prices). A key with the caps (GC's)
//! must show the same in its model group, and its customers together.
//! A gateway draining its ledger into a sink (GD's) must have one row
//! there per call: every call settles with one ledger entry.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{call_once, customer_id, Target};
use crate::error::BenchError;
use crate::setup::caps;

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
    /// The customers whose books were read too, with the model group's;
    /// 0 for a key without the caps.
    pub customers: usize,
}

impl SettleCheck {
    pub fn holds(&self) -> bool {
        self.reserved == 0 && self.spent == self.expected_spent
    }

    /// The check as a report's settlement section prints it, for the
    /// configuration `label`.
    pub fn line(&self, label: &str) -> String {
        format!(
            "  {label:<3} {:<14} {:>8} calls  spent {:>12} µUSD (expected {:>12})  reserved {:>6}  {}{}",
            self.phase,
            self.calls,
            self.spent,
            self.expected_spent,
            self.reserved,
            if self.holds() { "ok" } else { "MISMATCH" },
            match self.customers {
                0 => String::new(),
                n => format!(" (key, org, model group and its {n} customers together)"),
            }
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
        let (mut spent, mut reserved) = budget(target, org_only).await?;
        // With many keys the customers are each key's: the org's books
        // alone are read.
        let customers = if org_only { 0 } else { target.customers() };
        if customers > 0 {
            let (caps_spent, caps_reserved) = caps_budget(target, customers).await?;
            if caps_spent != spent {
                spent = u64::MAX;
            }
            reserved = reserved.max(caps_reserved);
        }
        let check = SettleCheck {
            phase,
            calls,
            expected_spent: charged,
            spent,
            reserved,
            customers,
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
    let budget = budget_json(target, target.get("/v1/budget")?).await?;
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

/// Spent and reserved of the key's model group, which every call matches,
/// and of its `customers` customers together, whose calls are all the
/// key's; spent is `u64::MAX` when the two disagree. Both count per UTC
/// day: a run across midnight sees them start again.
async fn caps_budget(target: &Target, customers: usize) -> Result<(u64, u64), BenchError> {
    let (mut group_spent, mut customers_spent, mut reserved) = (None, 0u64, 0u64);
    for n in 0..customers {
        let request = target.get_as_customer("/v1/budget", &customer_id(n))?;
        let budget = budget_json(target, request).await?;
        let field = |value: &Value, name: &str| value[name].as_u64().unwrap_or(u64::MAX);
        let customer = &budget["customer"];
        customers_spent = customers_spent.saturating_add(field(customer, "spent_usd_micros"));
        reserved = reserved.max(field(customer, "reserved_usd_micros"));
        if group_spent.is_none() {
            let group = budget["key"]["model_caps"]
                .as_array()
                .and_then(|groups| groups.iter().find(|g| g["name"] == caps::GROUP))
                .unwrap_or(&Value::Null);
            group_spent = Some(field(group, "spent_usd_micros"));
            reserved = reserved.max(field(group, "reserved_usd_micros"));
        }
    }
    let group_spent = group_spent.unwrap_or(u64::MAX);
    let spent = if group_spent == customers_spent {
        group_spent
    } else {
        u64::MAX
    };
    Ok((spent, reserved))
}

/// The body of a `GET /v1/budget`.
async fn budget_json(
    target: &Target,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> Result<Value, BenchError> {
    let reply = call_once(target.addr, request).await?;
    if reply.status != 200 {
        return Err(BenchError::Status {
            what: format!("{} GET /v1/budget", target.label),
            status: reply.status,
            body: String::from_utf8_lossy(&reply.body).into_owned(),
        });
    }
    serde_json::from_slice(&reply.body)
        .map_err(|e| BenchError::Invalid(format!("{} budget: {e}", target.label)))
}

/// How long a drained gateway may take to move its last ledger entries
/// into the sink after the last response (it drains once a second).
const SINK_GRACE: Duration = Duration::from_secs(5);

/// A drained gateway's sink (GD's) against its calls: every call settles
/// with one ledger entry, and the drain writes each once into the sink.
#[derive(Clone, Debug)]
pub struct SinkCheck {
    pub phase: &'static str,
    pub calls: u64,
    /// Rows in the sink's `ledger` table; `None` if it could not be read.
    pub rows: Option<u64>,
    /// Why the sink could not be read.
    pub error: Option<String>,
}

impl SinkCheck {
    pub fn holds(&self) -> bool {
        self.rows == Some(self.calls)
    }

    pub fn line(&self, label: &str) -> String {
        format!(
            "  {label:<3} {:<14} {:>8} calls  ledger sink rows {:>8}  {}",
            self.phase,
            self.calls,
            self.rows.map_or("—".to_owned(), |rows| rows.to_string()),
            match (&self.error, self.holds()) {
                (_, true) => "ok".to_owned(),
                (Some(error), false) => format!("MISMATCH ({error})"),
                (None, false) => "MISMATCH".to_owned(),
            }
        )
    }
}

/// Counts the sink's rows until they reach `calls` or the grace runs out.
pub fn check_sink(path: &std::path::Path, phase: &'static str, calls: u64) -> SinkCheck {
    let deadline = Instant::now() + SINK_GRACE;
    loop {
        let (rows, error) = match sink_rows(path) {
            Ok(rows) => (Some(rows), None),
            Err(error) => (None, Some(error)),
        };
        let check = SinkCheck {
            phase,
            calls,
            rows,
            error,
        };
        // More rows than calls will not become fewer: no point waiting.
        if check.rows.is_some_and(|rows| rows >= calls) || Instant::now() >= deadline {
            return check;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rows of the sink's `ledger` table, read-only while the gateway writes.
fn sink_rows(path: &std::path::Path) -> Result<u64, String> {
    use rusqlite::{Connection, OpenFlags};
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|error| format!("{}: {error}", path.display()))?;
    conn.busy_timeout(Duration::from_secs(1))
        .map_err(|error| error.to_string())?;
    conn.query_row("SELECT COUNT(*) FROM ledger", [], |row| {
        row.get::<_, i64>(0)
    })
    .map(|rows| u64::try_from(rows).unwrap_or(0))
    .map_err(|error| format!("{}: {error}", path.display()))
}
