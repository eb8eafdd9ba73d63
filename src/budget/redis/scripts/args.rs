//! The arguments of the scripts, each declared once by [`script_args!`]:
//! the Rust caller fills a struct by name, the script reads `argv.<name>`
//! (bound by [`bind_argv`]), and its header lists the same names, which
//! the tests here hold to the struct.

use std::time::Duration;

use super::super::drain::StreamEntry;
use crate::budget::{
    Adjustment, Cap, OnExpiry, Period, ReserveRequest, Scope, Settlement, StoreError,
};
use crate::money::{UsdMicros, UsdMicrosDelta};

/// The deadline of a reservation must stay far below 2^53 ms (see
/// `MAX_TTL_MS` in `lua/common.lua`); a longer TTL is shortened to this
/// (some 35,000 years).
const MAX_TTL_MS: u64 = 1 << 50;

/// The scripts refuse any integer argument of 2^53 or more (Lua numbers
/// are doubles).
const MAX_SCRIPT_INTEGER: u64 = (1 << 53) - 1;

/// Declares the ARGV of one script, once: a struct whose fields, in order,
/// are its arguments. The script reads them by name (`argv.<field>`, bound
/// by [`bind_argv`] in front of its body), its header lists the same names
/// (a test holds the two to each other), and the Rust caller fills the
/// fields by name, so no position is written twice.
macro_rules! script_args {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        pub(crate) struct $name {
            $(pub $field: $ty,)*
        }

        impl $name {
            /// The argument names, in ARGV order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            /// The arguments as the script takes them.
            pub fn argv(&self) -> Vec<String> {
                vec![$(self.$field.to_string()),*]
            }
        }
    };
}

/// A yes/no argument, as the scripts take it: `'1'` or `'0'`.
pub(crate) struct Flag(pub bool);

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0 { "1" } else { "0" })
    }
}

/// The Lua that binds a script's ARGV to the names `argv.<name>`, put
/// between common.lua (and the test clock, which takes its offset off the
/// end of ARGV first) and the body.
pub(crate) fn bind_argv(names: &[&str]) -> String {
    let fields: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, name)| format!("{name} = ARGV[{}]", i + 1))
        .collect();
    format!("local argv = {{ {} }}\n", fields.join(", "))
}

script_args! {
    /// ARGV of `reserve.lua`.
    ReserveArgs {
        exec_id: String,
        amount: UsdMicros,
        ttl_ms: u64,
        key_id: String,
        key_period: &'static str,
        key_cap: UsdMicros,
        has_org: Flag,
        org_id: String,
        org_period: &'static str,
        org_cap: UsdMicros,
        lazy_limit: usize,
        claim: String,
        on_expiry: &'static str,
        epoch: String,
        closed_record_ms: u64,
        model: String,
        min_amount: UsdMicros,
        run: String,
        run_cap: String,
        run_ttl_ms: u64,
        caps: String,
        tokens: u64,
        customer: String,
    }
}

script_args! {
    /// ARGV of `settle.lua`.
    SettleArgs {
        exec_id: String,
        key_id: String,
        has_org: Flag,
        org_id: String,
        model: String,
        input: u64,
        cached_input: u64,
        cache_write: u64,
        output: u64,
        actual: UsdMicros,
        estimated: Flag,
        epsilon: UsdMicros,
        call_id: String,
        on_expiry: &'static str,
        closed_record_ms: u64,
    }
}

script_args! {
    /// ARGV of `adjust.lua`.
    AdjustArgs {
        exec_id: String,
        key_id: String,
        key_period: &'static str,
        has_org: Flag,
        org_id: String,
        org_period: &'static str,
        amount: UsdMicrosDelta,
        note: String,
        epoch: String,
        closed_record_ms: u64,
        call_id: String,
    }
}

script_args! {
    /// ARGV of `sweep.lua`.
    SweepArgs {
        limit: usize,
        ledger_buffer_ms: u64,
        customer_ttl_ms: u64,
        on_expiry: &'static str,
        aggregate_days: u32,
    }
}

script_args! {
    /// ARGV of `drain.lua`.
    DrainArgs {
        through: String,
        limit: usize,
        first: String,
        sums: String,
    }
}

script_args! {
    /// ARGV of `state.lua`.
    StateArgs {
        kind: &'static str,
        id: String,
        period: &'static str,
    }
}

/// The separator of the fields of `reserve.lua`'s `caps`, which no id
/// holds.
const CAP_SEPARATOR: char = '|';

/// `reserve.lua`'s `caps`: `kind|id|meter|period|limit` of each cap, all
/// joined by `|`; `Refused` for an id that holds a `|` (or is empty),
/// which the script would misread.
pub(crate) fn caps_arg(caps: &[Cap]) -> Result<String, StoreError> {
    let mut fields = Vec::with_capacity(caps.len() * 5);
    for cap in caps {
        if cap.id.is_empty() || cap.id.contains(CAP_SEPARATOR) {
            return Err(StoreError::Refused(format!(
                "the {} cap id {:?} is empty or holds {CAP_SEPARATOR:?}",
                cap.kind.as_str(),
                cap.id
            )));
        }
        fields.extend([
            cap.kind.as_str().to_owned(),
            cap.id.clone(),
            cap.meter.as_str().to_owned(),
            cap.period.as_str().to_owned(),
            cap.limit.to_string(),
        ]);
    }
    Ok(fields.join(&CAP_SEPARATOR.to_string()))
}

/// ARGV of `reserve.lua`; `claim` is the request's idempotency claim,
/// `epoch` the store epoch the gateway serves under; `Refused` for caps
/// the script cannot be told ([`caps_arg`]).
pub(crate) fn reserve_args(
    req: &ReserveRequest,
    claim: Option<&str>,
    lazy_limit: usize,
    on_expiry: OnExpiry,
    epoch: &str,
    closed_record_ms: u64,
    run_ttl_ms: u64,
) -> Result<Vec<String>, StoreError> {
    let (run, run_cap) = match &req.run {
        Some(run) => (run.id.clone(), run.cap.map(|cap| cap.to_string())),
        None => (String::new(), None),
    };
    let (org_id, org_period, org_cap) = match &req.org {
        Some(org) => (org.id.clone(), org.period.as_str(), org.cap),
        None => (String::new(), Period::Total.as_str(), 0),
    };
    Ok(ReserveArgs {
        exec_id: req.exec_id.clone(),
        amount: req.amount,
        ttl_ms: millis(req.ttl).min(MAX_TTL_MS),
        key_id: req.key.id.clone(),
        key_period: req.key.period.as_str(),
        key_cap: req.key.cap,
        has_org: Flag(req.org.is_some()),
        org_id,
        org_period,
        org_cap,
        lazy_limit,
        claim: claim.unwrap_or_default().to_owned(),
        on_expiry: on_expiry.as_str(),
        epoch: epoch.to_owned(),
        closed_record_ms: closed_record_ms.min(MAX_TTL_MS),
        model: req.model.clone(),
        min_amount: req.min_amount.min(req.amount),
        run,
        run_cap: run_cap.unwrap_or_default(),
        run_ttl_ms: run_ttl_ms.min(MAX_TTL_MS),
        caps: caps_arg(&req.caps)?,
        // The other stores clamp it alike.
        tokens: req.tokens.min(MAX_SCRIPT_INTEGER),
        customer: customer_arg(req.customer.as_deref())?,
    }
    .argv())
}

/// `reserve.lua`'s `customer`: the id, or `""` for none; `Refused` for
/// one the script would refuse (not 1 to 128 of `[A-Za-z0-9._:@-]`),
/// which the gateway checks before.
pub(crate) fn customer_arg(customer: Option<&str>) -> Result<String, StoreError> {
    let Some(customer) = customer else {
        return Ok(String::new());
    };
    let valid = (1..=128).contains(&customer.len())
        && customer
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:_@-".contains(&b));
    if !valid {
        return Err(StoreError::Refused(format!(
            "the customer id {customer:?} is not 1 to 128 of [A-Za-z0-9._:@-]"
        )));
    }
    Ok(customer.to_owned())
}

/// ARGV of `settle.lua`; `call_id` is the same for every attempt of one
/// call.
pub(crate) fn settle_args(
    settlement: &Settlement,
    epsilon: UsdMicros,
    call_id: &str,
    on_expiry: OnExpiry,
    closed_record_ms: u64,
) -> Vec<String> {
    let usage = &settlement.usage;
    SettleArgs {
        exec_id: settlement.exec_id.clone(),
        key_id: settlement.key.clone(),
        has_org: Flag(settlement.org.is_some()),
        org_id: settlement.org.clone().unwrap_or_default(),
        model: settlement.model.clone(),
        // Token counts past 2^53 are no call's (the gateway charges such a
        // usage its bound before it settles); clamped, the script answers
        // as the other stores do rather than refusing its arguments.
        input: usage.input.min(MAX_SCRIPT_INTEGER),
        cached_input: usage.cached_input.min(MAX_SCRIPT_INTEGER),
        cache_write: usage.cache_write.min(MAX_SCRIPT_INTEGER),
        output: usage.output.min(MAX_SCRIPT_INTEGER),
        actual: settlement.actual,
        estimated: Flag(settlement.estimated),
        epsilon,
        call_id: call_id.to_owned(),
        on_expiry: on_expiry.as_str(),
        closed_record_ms: closed_record_ms.min(MAX_TTL_MS),
    }
    .argv()
}

/// ARGV of `adjust.lua`; `epoch` is the store epoch the gateway serves
/// under, `call_id` the same for every attempt of one call.
pub(crate) fn adjust_args(
    adjustment: &Adjustment,
    epoch: &str,
    closed_record_ms: u64,
    call_id: &str,
) -> Vec<String> {
    let (org_id, org_period) = match &adjustment.org {
        Some(org) => (org.id.clone(), org.period.as_str()),
        None => (String::new(), Period::Total.as_str()),
    };
    AdjustArgs {
        exec_id: adjustment.exec_id.clone(),
        key_id: adjustment.key.id.clone(),
        key_period: adjustment.key.period.as_str(),
        has_org: Flag(adjustment.org.is_some()),
        org_id,
        org_period,
        amount: adjustment.amount,
        note: adjustment.note.clone(),
        epoch: epoch.to_owned(),
        closed_record_ms: closed_record_ms.min(MAX_TTL_MS),
        call_id: call_id.to_owned(),
    }
    .argv()
}

/// A duration in whole milliseconds, as the scripts take it.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// ARGV of `sweep.lua`; `customer_ttl` is how long a customer is kept
/// after its last call, `aggregate_days` how many days back spend
/// aggregate rows are kept.
pub(crate) fn sweep_args(
    limit: usize,
    retention: Duration,
    customer_ttl: Duration,
    on_expiry: OnExpiry,
    aggregate_days: u32,
) -> Vec<String> {
    SweepArgs {
        limit,
        // No retention needs that long.
        ledger_buffer_ms: millis(retention).min(MAX_SCRIPT_INTEGER),
        // Keeps `last call + ttl` far below 2^53.
        customer_ttl_ms: millis(customer_ttl).min(MAX_TTL_MS),
        on_expiry: on_expiry.as_str(),
        aggregate_days,
    }
    .argv()
}

/// ARGV of `drain.lua` for a page of entries read from the start of a
/// tag's stream: its last entry's id, its length, its first entry's id and
/// what its entries add to each folded sum (as `fold` in `lua/fold.lua`
/// sums them). A page the script could not take sums of goes without
/// them (`first` and `sums` empty), and the script reads its entries
/// itself: a key, org or period id holding the separator, an org without
/// its period, a sum of 2^53 or more.
pub(crate) fn drain_args(page: &[StreamEntry]) -> Vec<String> {
    let mut sums: Vec<(String, UsdMicrosDelta)> = Vec::new();
    let mut summable = true;
    for entry in page {
        let mut add = |field: String| match sums.iter_mut().find(|(known, _)| *known == field) {
            Some((_, sum)) => *sum = sum.saturating_add(entry.actual),
            None => sums.push((field, entry.actual)),
        };
        add(format!("key:{}:{}:f", entry.key, entry.key_period));
        match (&entry.org, &entry.org_period) {
            (Some(org), Some(period)) => add(format!("org:{org}:{period}:f")),
            (None, None) => {}
            _ => summable = false,
        }
    }
    summable &= sums.iter().all(|(field, sum)| {
        !field.contains(SUM_SEPARATOR) && sum.unsigned_abs() <= MAX_SAFE_INTEGER
    });
    let (first, sums) = match page.first() {
        Some(entry) if summable => (
            entry.id.clone(),
            sums.iter()
                .flat_map(|(field, sum)| [field.clone(), sum.to_string()])
                .collect::<Vec<_>>()
                .join(&SUM_SEPARATOR.to_string()),
        ),
        _ => (String::new(), String::new()),
    };
    DrainArgs {
        through: page
            .last()
            .map(|entry| entry.id.clone())
            .unwrap_or_default(),
        limit: page.len(),
        first,
        sums,
    }
    .argv()
}

/// The largest integer a Lua number (a double) holds exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The separator of `drain.lua`'s `sums`.
const SUM_SEPARATOR: char = '|';

/// ARGV of `state.lua`.
pub(crate) fn state_args(scope: &Scope) -> Vec<String> {
    StateArgs {
        kind: scope.kind.as_str(),
        id: scope.id.clone(),
        period: scope.period.as_str(),
    }
    .argv()
}

#[cfg(test)]
mod tests;
