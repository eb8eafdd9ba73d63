//! Tests of settling: usage no call can have charged the call's upper
//! bound at once, and a cut stream charged at the tier it reported.

use super::*;

use crate::budget::{LedgerStatus, MemoryStore, Period, ReserveRequest, Rules, Scope, ScopeKind};
use crate::money::{Price, MAX_USD_MICROS};
use crate::usage::AbsurdUsage;

/// The bound of every call here: 100 input and 50 output tokens, at most.
const BOUND: Estimate = Estimate {
    seen_input_tokens: 100,
    input_tokens: 100,
    output_tokens: 50,
    amount: 2_000,
    tools: crate::estimate::ToolBound::NONE,
    options: crate::prices::PricedOptions::STANDARD,
};

fn price() -> ModelPrice {
    ModelPrice {
        input: Price::per_mtok("10").unwrap(),
        cached_input: Price::per_mtok("5").unwrap(),
        cache_write: Price::per_mtok("10").unwrap(),
        output: Price::per_mtok("20").unwrap(),
        max_output_tokens: Some(50),
        context_window: None,
        reasoning: false,
        tool_call_usd: Default::default(),
        ..ModelPrice::default()
    }
}

fn alice() -> KeyConfig {
    KeyConfig {
        id: "alice".to_owned(),
        org: None,
        key_sha256: [0; 32],
        cap: MAX_USD_MICROS,
        period: Period::Total,
        models: None,
        on_insufficient: crate::config::OnInsufficient::Refuse,
        alert_at: Vec::new(),
        limits: crate::config::Limits::default(),
        customer: crate::config::CustomerTemplate::default(),
    }
}

fn reserve(store: &MemoryStore, exec_id: &str, amount: UsdMicros) {
    let key = alice();
    let request = ReserveRequest {
        caps: Vec::new(),
        tokens: 0,
        customer: None,
        exec_id: exec_id.to_owned(),
        key: Scope {
            kind: ScopeKind::Key,
            id: key.id,
            cap: key.cap,
            period: key.period,
        },
        org: None,
        model: "gpt-test".to_owned(),
        amount,
        min_amount: amount,
        run: None,
        ttl: Duration::from_secs(60),
    };
    assert!(store.reserve(&request).is_reserved());
}

/// A memory store and a ticket for one call of [`BOUND`] already sent to
/// the provider, its bound reserved.
fn sent_call(store: &MemoryStore, metrics: &Arc<Metrics>, exec_id: &str) -> SettleTicket {
    let settler = Settler::new(
        BudgetStore::Memory(store.clone()),
        metrics.clone(),
        Duration::from_secs(60),
    );
    let mut ticket = settler.ticket(exec_id, &alice(), "gpt-test", &price(), BOUND);
    reserve(store, exec_id, BOUND.amount);
    ticket.sent(false, false);
    ticket
}

fn absurd_count(metrics: &Metrics) -> String {
    let text = metrics.encode(None).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("tollgate_absurd_usage_total "))
        .unwrap_or_default()
        .to_owned()
}

/// Charged the bound: what was reserved, with the estimated input and the
/// output limit as its usage, marked estimated.
fn assert_charged_the_bound(store: &MemoryStore, outcome: Option<SettleOutcome>) {
    let outcome = outcome.expect("settled");
    assert_eq!(
        (outcome.status, outcome.actual, outcome.applied),
        (LedgerStatus::Estimated, BOUND.amount, true)
    );
    let ledger = store.ledger();
    let entry = ledger.last().unwrap();
    assert_eq!(entry.usage, BOUND.fallback_usage(BOUND.output_tokens));
    assert_eq!(entry.actual, crate::money::delta(BOUND.amount));
    assert!(store.reconcile().iter().all(|row| row.drift() == 0));
}

#[tokio::test]
async fn a_count_no_call_can_have_is_charged_the_bound() {
    let store = MemoryStore::new(Rules::default());
    let metrics = Arc::new(Metrics::new());
    let mut ticket = sent_call(&store, &metrics, "negative");
    let absurd = AbsurdUsage {
        field: "completion_tokens",
        value: "-12".to_owned(),
    };
    let outcome = ticket.settle_reported(Err(absurd)).unwrap().await;
    assert_charged_the_bound(&store, outcome);
    assert_eq!(absurd_count(&metrics), "1");
}

#[tokio::test]
async fn a_cost_of_2_to_the_53_is_charged_the_bound() {
    let store = MemoryStore::new(Rules::default());
    let metrics = Arc::new(Metrics::new());
    let mut ticket = sent_call(&store, &metrics, "huge");
    // Each count is below 2^53, but at $20/Mtok their cost is not.
    let usage = Usage {
        input: 10,
        output: MAX_USD_MICROS,
        ..Usage::default()
    };
    let outcome = ticket.settle_reported(Ok(usage)).unwrap().await;
    assert_charged_the_bound(&store, outcome);
    assert_eq!(absurd_count(&metrics), "1");
}

/// A cost the store will never take (its counter would reach 2^53) is
/// charged the bound at once, not retried for two TTLs as an outage.
#[tokio::test]
async fn a_settle_the_store_refuses_as_out_of_range_is_charged_the_bound_at_once() {
    let store = MemoryStore::new(Rules::default());
    let metrics = Arc::new(Metrics::new());
    // An earlier call's overrun left the counter just below 2^53.
    reserve(&store, "earlier", 10);
    let earlier = Settlement {
        exec_id: "earlier".to_owned(),
        key: "alice".to_owned(),
        org: None,
        model: "gpt-test".to_owned(),
        usage: Usage::default(),
        actual: MAX_USD_MICROS - 3 * BOUND.amount,
        estimated: false,
    };
    store.settle(&earlier).unwrap();

    let mut ticket = sent_call(&store, &metrics, "refused");
    // 5,000 output tokens cost 100,000 µUSD: fine alone, not on this counter.
    let usage = Usage {
        input: 100,
        output: 5_000,
        ..Usage::default()
    };
    let started = std::time::Instant::now();
    let outcome = ticket.settle_reported(Ok(usage)).unwrap().await;
    assert!(started.elapsed() < Duration::from_secs(1), "retried");
    assert_charged_the_bound(&store, outcome);
    assert_eq!(absurd_count(&metrics), "1");
}

// === The tier of a call whose usage never came ===

/// A stream cut before its usage is charged at the tier its chunks
/// reported; a call that left its tier to the project's default and
/// reported none is charged at priority, as it may have been served.
#[tokio::test]
async fn a_cut_stream_is_charged_at_the_tier_it_reported() {
    use crate::prices::{PricedOptions, PriorityPrices};
    use crate::usage::ServiceTier;
    let priced = ModelPrice {
        priority: Some(PriorityPrices {
            input: Price::per_mtok("20").unwrap(),
            output: Price::per_mtok("40").unwrap(),
            cached_input: None,
        }),
        ..price()
    };
    // 100 input tokens at $20/Mtok and 50 output at $40/Mtok.
    let open = Estimate {
        amount: 4_000,
        options: PricedOptions::default(),
        ..BOUND
    };
    let store = MemoryStore::new(Rules::default());
    let settler = Settler::new(
        BudgetStore::Memory(store.clone()),
        Arc::new(Metrics::new()),
        Duration::from_secs(60),
    );
    for (exec_id, reported, charged) in [
        ("standard", Some(ServiceTier::Standard), BOUND.amount),
        ("priority", Some(ServiceTier::Priority), open.amount),
        ("unreported", None, open.amount),
    ] {
        let mut ticket = settler.ticket(exec_id, &alice(), "gpt-test", &priced, open);
        reserve(&store, exec_id, open.amount);
        ticket.sent(true, false);
        // Ten tokens seen, no input reported: the estimated input, and
        // the output limit once the in-flight margin is added.
        let seen = Usage {
            output: 10,
            service_tier: reported,
            ..Usage::default()
        };
        let outcome = ticket.settle_seen(seen).unwrap().await.unwrap();
        assert_eq!(
            (outcome.status, outcome.actual),
            (LedgerStatus::Estimated, charged),
            "{exec_id}"
        );
    }
}
