//! Two gateway processes on a 3-primary Redis Cluster share every cap
//! exactly, as on one node: each org's data (and a key's without an org)
//! lives in one hash slot, every script touches only that slot, so a burst
//! spread over several slots on different primaries runs with no CROSSSLOT
//! or other store error, spends within every cap and leaves balanced books.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use futures_util::future::join_all;
use tollgate::budget::LedgerStatus;
use tollgate::usage::Usage;

use crate::redis_support::servers::{redis_cli, Cluster};
use crate::redis_support::*;

const CALLS: usize = 300;

/// The primary holding a tag's data.
fn primary_of(cluster: &Cluster, tag: &str) -> u16 {
    cluster.primary_for(cluster.slot(&format!("tg:{{{tag}}}:spend")))
}

/// Log lines at WARN or ERROR, or naming a cross-slot refusal.
fn trouble(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| {
            let level = line.split_whitespace().nth(1).unwrap_or_default();
            level == "WARN" || level == "ERROR" || line.contains("CROSSSLOT")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_a_redis_cluster_never_overspend_across_slots() {
    let started = Instant::now();
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let cluster_up = started.elapsed();
    let mock = mock().await;

    // Two orgs and a key without one, each tag on its own primary.
    let mut used = HashSet::new();
    let mut org = |cap| loop {
        let org = OrgSpec {
            id: unique("org"),
            cap,
            period: "month",
        };
        if used.insert(primary_of(&cluster, &org.id)) {
            break org;
        }
    };
    let acme = org("0.050000");
    let globex = org("0.030000");
    let solo = loop {
        let key = KeySpec::new("solo", None, "0.020000", "total");
        if used.insert(primary_of(&cluster, &key.tag())) {
            break key;
        }
    };
    let keys = vec![
        KeySpec::new("alice", Some(&acme), "0.030000", "day"),
        KeySpec::new("bob", Some(&acme), "0.030000", "day"),
        KeySpec::new("carol", Some(&globex), "0.040000", "week"),
        solo,
    ];
    let caps = HashMap::from([
        (acme.id.clone(), 50_000),
        (globex.id.clone(), 30_000),
        (keys[0].id.clone(), 30_000),
        (keys[1].id.clone(), 30_000),
        (keys[2].id.clone(), 40_000),
        (keys[3].id.clone(), 20_000),
    ]);
    // Seeded from every node, and from two of them: the cluster form of a
    // `redis://` URL.
    let ports = cluster.ports();
    let mut config = GatewayConfig::new(&cluster.url(), mock.addr);
    config.orgs = vec![acme, globex];
    config.keys = keys;
    let tags = config.tags();
    assert_eq!(tags.len(), 3);
    let mut seeded_by_two = config.clone();
    seeded_by_two.redis_url = format!("redis://127.0.0.1:{},127.0.0.1:{}", ports[2], ports[1]);
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&seeded_by_two)
    );
    let booted = started.elapsed();

    let client = client();
    let gateways = [a.url.clone(), b.url.clone()];
    let raw: Vec<String> = config.keys.iter().map(|key| key.raw.clone()).collect();
    let calls = (0..CALLS).map(|i| {
        let client = client.clone();
        let gateway = gateways[i % 2].clone();
        let key = raw[(i / 2) % raw.len()].clone();
        async move { mixed_call(&client, &gateway, &key, i).await }
    });
    let answers = join_all(calls).await;
    let burst = started.elapsed() - booted;
    let forwarded = answers.iter().filter(|(status, _)| *status == 200).count();
    let denied = answers.iter().filter(|(status, _)| *status == 402).count();
    assert_eq!(forwarded + denied, CALLS, "{answers:?}");
    assert!(forwarded > 0 && denied > 0, "{forwarded} forwarded");
    for gateway in [&a, &b] {
        let log = gateway.log();
        assert!(trouble(&log).is_empty(), "store trouble:\n{log}");
    }

    // Both gateways read the same counters, within every cap.
    let mut spent: HashMap<String, u64> = HashMap::new();
    for (key, raw) in config.keys.iter().zip(&raw) {
        let seen_by_a = budget(&a.url, raw).await;
        assert_eq!(
            seen_by_a,
            budget(&b.url, raw).await,
            "the gateways disagree"
        );
        let key_spent = field(&seen_by_a, "key", "spent_usd_micros");
        assert!(key_spent <= caps[&key.id], "{seen_by_a}");
        assert_eq!(field(&seen_by_a, "key", "reserved_usd_micros"), 0);
        spent.insert(key.id.clone(), key_spent);
        if let Some(org) = &key.org {
            let org_spent = field(&seen_by_a, "org", "spent_usd_micros");
            assert!(org_spent <= caps[org], "{seen_by_a}");
            assert_eq!(field(&seen_by_a, "org", "reserved_usd_micros"), 0);
            spent.insert(org.clone(), org_spent);
        }
    }

    // Each tag's ledger prices what the provider billed and adds up to its
    // counters; the books balance.
    let store = store(&cluster.url()).await;
    let prices = prices();
    let mut billed = Usage::default();
    let mut entries = 0;
    for tag in &tags {
        let ledger = store.ledger(tag).await.unwrap();
        entries += ledger.len();
        let mut by_scope: HashMap<&str, i64> = HashMap::new();
        for entry in &ledger {
            assert_eq!(entry.status, LedgerStatus::Ok, "{entry:?}");
            let price = prices.get(&entry.model).unwrap();
            assert_eq!(entry.actual, delta(price.cost(&entry.usage)), "{entry:?}");
            billed = add_usage(billed, &entry.usage);
            *by_scope.entry(entry.key.as_str()).or_default() += entry.actual;
            if let Some(org) = &entry.org {
                *by_scope.entry(org.as_str()).or_default() += entry.actual;
            }
        }
        for (scope, sum) in by_scope {
            assert_eq!(delta(spent[scope]), sum, "{scope} under {tag}");
        }
    }
    assert_eq!(entries, forwarded);
    assert_eq!(mock.stats.requests(), forwarded as u64);
    assert_eq!(billed_by(&mock.stats), billed);
    let rows = assert_books_balance(&store, &tags).await;
    assert_eq!(rows.len(), 6, "{rows:?}");

    // The data really is spread over the primaries.
    for tag in &tags {
        let primary = primary_of(&cluster, tag);
        let key = format!("tg:{{{tag}}}:spend");
        assert_eq!(redis_cli(primary, &["exists", &key]).trim(), "1", "{key}");
    }
    assert_eq!(used.len(), 3);
    eprintln!(
        "{CALLS} calls: {forwarded} forwarded, {denied} denied; cluster up {cluster_up:?}, \
         boot {booted:?}, burst {burst:?}, total {:?}",
        started.elapsed()
    );
}
