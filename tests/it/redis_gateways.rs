//! Several gateway processes on one Redis share every cap exactly: under a
//! burst of concurrent calls split across them, nothing is spent past a
//! key's or an org's cap, what is spent is exactly what the provider
//! billed, every forwarded call is reserved and settled once (one script
//! call each), and the books balance with no reservation left open.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tollgate::budget::{LedgerStatus, ScopeKind};
use tollgate::usage::Usage;

use crate::redis_support::servers::{evalsha_of, Monitor};
use crate::redis_support::*;

const CALLS: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_never_overspend_and_keep_exact_books() {
    let started = Instant::now();
    let mock = mock().await;
    // The org's cap is below the sum of its keys' caps, and bob's cap is
    // small enough to bind before the org's: both kinds of scope deny.
    let org = OrgSpec {
        id: unique("org"),
        cap: "0.070000",
        period: "month",
    };
    let alice = KeySpec::new("alice", Some(&org), "0.060000", "day");
    let bob = KeySpec::new("bob", Some(&org), "0.025000", "total");
    let (org_cap, alice_cap, bob_cap) = (70_000, 60_000, 25_000);
    let tag = alice.tag();
    let org_id = org.id.clone();
    let mut config = GatewayConfig::new(shared_redis_url(), mock.addr);
    config.orgs.push(org);
    config.keys = vec![alice, bob];
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let gateways = [a.url.clone(), b.url.clone()];
    let raw = [config.keys[0].raw.clone(), config.keys[1].raw.clone()];
    let booted = started.elapsed();

    let monitor = Monitor::start(shared_redis_port(), &format!("{{{tag}}}"));
    let client = client();
    let calls = (0..CALLS).map(|i| {
        let client = client.clone();
        let gateway = gateways[i % 2].clone();
        let key = raw[(i / 2) % 2].clone();
        async move { mixed_call(&client, &gateway, &key, i).await }
    });
    let answers = join_all(calls).await;
    let burst = started.elapsed() - booted;
    let forwarded = answers.iter().filter(|(status, _)| *status == 200).count();
    let denied = answers.iter().filter(|(status, _)| *status == 402).count();
    let odd: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status != 200 && *status != 402)
        .collect();
    assert!(odd.is_empty(), "answers other than 200 and 402: {odd:?}");
    assert_eq!(forwarded + denied, CALLS);
    assert!(
        forwarded > 0 && denied > 0,
        "the caps must bite: {forwarded} forwarded"
    );
    // Both kinds of scope denied some call, named in the message.
    let named = |id: &str| {
        answers
            .iter()
            .any(|(status, text)| *status == 402 && text.contains(&format!("`{id}`")))
    };
    assert!(named(&config.keys[1].id), "bob's key cap never denied");
    assert!(named(&org_id), "the org cap never denied");

    // Every call is settled before its client sees the end; nothing stays
    // open, and the provider billed what it was asked to.
    let store = store(shared_redis_url()).await;
    let tags = vec![tag.clone()];
    assert_eq!(store.open_reservations_in(&tags).await.unwrap(), (0, 0));
    let ledger = store.ledger(&tag).await.unwrap();
    assert_eq!(
        ledger.len(),
        forwarded,
        "one ledger entry per forwarded call"
    );
    assert_eq!(mock.stats.requests(), forwarded as u64);

    // One reserve per call and one settle per forwarded call, on this
    // tag's keys: exactly, counted by exec id. A store call that timed out
    // is retried with the same exec id (idempotent), so on a starved
    // machine an exec id may show up more than once; the sweepers' calls
    // are counted apart.
    let mut by_script: HashMap<String, Vec<String>> = HashMap::new();
    for line in monitor.finish() {
        if let Some((sha, exec_id)) = evalsha_of(&line) {
            let calls = by_script.entry(sha.to_owned()).or_default();
            calls.push(exec_id.to_owned());
        }
    }
    let mut calls_of = |script: &str| by_script.remove(&script_sha(script)).unwrap_or_default();
    let (reserves, settles) = (calls_of("reserve"), calls_of("settle"));
    let sweeps = calls_of("sweep").len();
    // The tag's first reserves find its books unmarked: each marks them
    // with the store epoch (its first argument) and asks again.
    let marks = calls_of("mark_epoch");
    assert!(!marks.is_empty(), "the new tag was never marked");
    assert_eq!(marks.iter().collect::<HashSet<_>>().len(), 1, "{marks:?}");
    assert!(by_script.is_empty(), "other scripts ran: {by_script:?}");
    let distinct = |calls: &[String]| calls.iter().collect::<HashSet<_>>().len();
    assert_eq!(distinct(&reserves), forwarded + denied, "reserved exec ids");
    let settled: HashSet<&String> = settles.iter().collect();
    let charged: HashSet<&String> = ledger.iter().map(|entry| &entry.exec_id).collect();
    assert_eq!(settled, charged, "settled exec ids");
    let retries = (reserves.len() + settles.len() - distinct(&reserves) - distinct(&settles))
        .saturating_sub(marks.len());
    assert!(retries <= CALLS / 10, "{retries} retried store calls");

    // Both gateways read the same books.
    let budgets_a = [budget(&a.url, &raw[0]).await, budget(&a.url, &raw[1]).await];
    let budgets_b = [budget(&b.url, &raw[0]).await, budget(&b.url, &raw[1]).await];
    assert_eq!(budgets_a, budgets_b, "the gateways disagree");
    let [alice_budget, bob_budget] = &budgets_a;
    let alice_spent = field(alice_budget, "key", "spent_usd_micros");
    let bob_spent = field(bob_budget, "key", "spent_usd_micros");
    let org_spent = field(alice_budget, "org", "spent_usd_micros");
    assert!(alice_spent <= alice_cap, "{alice_budget}");
    assert!(bob_spent <= bob_cap, "{bob_budget}");
    assert!(org_spent <= org_cap, "{alice_budget}");
    assert!(
        org_spent >= org_cap / 2,
        "the burst should fill most of the org cap: {alice_budget}"
    );
    assert_eq!(org_spent, alice_spent + bob_spent);
    for budget in &budgets_a {
        assert_eq!(field(budget, "key", "reserved_usd_micros"), 0, "{budget}");
        assert_eq!(field(budget, "org", "reserved_usd_micros"), 0, "{budget}");
    }

    // What was charged is the price of what the provider billed, call by
    // call, and adds up to what was spent.
    let prices = prices();
    let mut billed = Usage::default();
    let mut spent_by_key: HashMap<&str, i64> = HashMap::new();
    let mut exec_ids = HashSet::new();
    for entry in &ledger {
        assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
        assert!(exec_ids.insert(entry.exec_id.clone()), "{entry:?} twice");
        assert_eq!(entry.org.as_deref(), Some(org_id.as_str()));
        assert_eq!(
            entry.actual,
            delta(prices.get(&entry.model).unwrap().cost(&entry.usage)),
            "{entry:?}"
        );
        assert!(entry.actual <= delta(entry.reserved), "{entry:?}");
        billed = add_usage(billed, &entry.usage);
        *spent_by_key.entry(entry.key.as_str()).or_default() += entry.actual;
    }
    let billed_by_mock = eventually(Duration::from_secs(2), || {
        let billed = billed;
        let stats = mock.stats.clone();
        async move { billed_by(&stats) == billed }
    })
    .await;
    assert!(billed_by_mock, "{billed:?} != {:?}", mock.stats.billed());
    assert_eq!(
        spent_by_key.get(config.keys[0].id.as_str()),
        Some(&delta(alice_spent))
    );
    assert_eq!(
        spent_by_key.get(config.keys[1].id.as_str()),
        Some(&delta(bob_spent))
    );
    assert_eq!(
        ledger.iter().map(|e| e.actual).sum::<i64>(),
        delta(org_spent)
    );

    // The counters equal the ledger, scope by scope.
    let rows = assert_books_balance(&store, &tags).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        let expected = match row.kind {
            ScopeKind::Org => org_spent,
            ScopeKind::Key if row.id == config.keys[0].id => alice_spent,
            _ => bob_spent,
        };
        assert_eq!(row.counter, expected, "{row:?}");
    }
    eprintln!(
        "{CALLS} calls: {forwarded} forwarded, {denied} denied; EVALSHA: {} reserve, \
         {} settle ({retries} retries), {sweeps} sweep, {} mark; \
         spent alice {alice_spent} bob {bob_spent} org {org_spent}; \
         boot {booted:?}, burst {burst:?}, total {:?}",
        reserves.len(),
        settles.len(),
        marks.len(),
        started.elapsed()
    );
}
