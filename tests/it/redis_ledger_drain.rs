//! The Redis ledger drains into the ledger sink: real `tollgate serve`
//! processes on the shared Redis, with `store.ledger_sink_path`, serve
//! calls; every call lands in the sink file exactly once (two gateways
//! sharing one file included), the tag's stream is trimmed, and `tollgate
//! reconcile` balances with what was trimmed shown as folded. While the
//! sink cannot be opened or written, calls are still served, the metric
//! and the log say so, the stream keeps every entry, and all of it drains
//! once the sink is back.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::redis_support::*;

/// How long a drain may take to catch up: it runs every second.
const DRAINED_WITHIN: Duration = Duration::from_secs(20);

fn setup(sink: &Path) -> GatewayConfig {
    let mut config =
        GatewayConfig::new(shared_redis_url(), std::net::SocketAddr::from(([0; 4], 0)));
    let org = OrgSpec {
        id: unique("drain-org"),
        cap: "100.00",
        period: "month",
    };
    let key = KeySpec::new("drain-key", Some(&org), "50.00", "day");
    config.orgs.push(org);
    config.keys.push(key);
    config.store_extra = format!("ledger_sink_path = \"{}\"", sink.display());
    config
}

/// Makes `count` calls through `gateway`; returns their exec ids.
async fn calls(gateway: &str, key: &str, count: usize) -> BTreeSet<String> {
    let client = client();
    let mut ids = BTreeSet::new();
    for i in 0..count {
        let body = chat("gpt-4o-mini", &format!("drain call {i}"), i % 2 == 0, 20);
        let response = post_chat(&client, gateway, key, &body).await;
        assert_eq!(response.status(), 200);
        let id = response.headers()["x-tollgate-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        // The body is read through, so the call settles before the next.
        response.bytes().await.unwrap();
        ids.insert(id);
    }
    ids
}

async fn stream_length(tag: &str) -> u64 {
    let mut redis = redis::Client::open(shared_redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("XLEN")
        .arg(format!("tg:{{{tag}}}:ledger"))
        .query_async(&mut redis)
        .await
        .unwrap()
}

/// The sink's rows of `key`: exec id, status and actual, in file order.
fn sink_rows(sink: &Path, key: &str) -> Vec<(String, String, i64)> {
    if !sink.is_file() {
        return Vec::new();
    }
    let conn =
        rusqlite::Connection::open_with_flags(sink, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let query = conn.prepare(
        "SELECT exec_id, status, actual_usd_micros FROM ledger WHERE key = ?1 ORDER BY seq",
    );
    // The gateway may have made the file and not yet its table.
    let Ok(mut query) = query else {
        return Vec::new();
    };
    query
        .query_map([key], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Waits until the sink holds exactly `ids` (once each) for `key` and
/// the tag's stream is empty; panics with the gateways' logs otherwise.
async fn assert_drained(
    sink: &Path,
    key: &str,
    tag: &str,
    ids: &BTreeSet<String>,
    gateways: &[&GatewayProcess],
) {
    let drained = eventually(DRAINED_WITHIN, || async {
        sink_rows(sink, key).len() >= ids.len() && stream_length(tag).await == 0
    })
    .await;
    let logs: Vec<String> = gateways.iter().map(|g| g.log()).collect();
    assert!(drained, "not drained:\n{}", logs.join("\n---\n"));
    let rows = sink_rows(sink, key);
    let drained: Vec<String> = rows.iter().map(|row| row.0.clone()).collect();
    assert_eq!(drained.len(), ids.len(), "a call is in the sink twice");
    assert_eq!(&drained.into_iter().collect::<BTreeSet<_>>(), ids);
    assert!(rows.iter().all(|row| row.1 == "ok"), "{rows:?}");
}

/// `tollgate reconcile` on `config`: its exit code and its JSON report.
async fn reconcile(config: &GatewayConfig) -> (Option<i32>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["reconcile", "--json", "--config"])
        .arg(&path)
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_REDIS_URL")
        .env("RUST_LOG", "warn")
        .env("TEST_PROVIDER_KEY", PROVIDER_KEY)
        .output()
        .await
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "reconcile printed no JSON: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

/// The key's row of a reconcile report: (counter, folded, ledger).
fn key_row(report: &serde_json::Value, key: &str) -> (u64, i64, i64) {
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["kind"] == "key" && row["id"] == key)
        .unwrap_or_else(|| panic!("no key row in {report}"));
    let number = |name: &str| {
        row[name]
            .as_i64()
            .unwrap_or_else(|| panic!("{name} in {row}"))
    };
    (
        u64::try_from(number("counter_usd_micros")).unwrap(),
        number("folded_usd_micros"),
        number("ledger_usd_micros"),
    )
}

async fn scrape(gateway: &str) -> String {
    reqwest::get(format!("{gateway}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A counter or gauge of a scrape; `None` when absent.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_drain_every_call_into_one_sink_exactly_once() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("ledger.db");
    let mut config = setup(&sink);
    config.provider = mock.addr;
    let key = config.keys[0].clone();
    let tag = key.tag();
    let (a, b) = tokio::join!(
        GatewayProcess::start(&config),
        GatewayProcess::start(&config)
    );
    let (mut ids, more) = tokio::join!(calls(&a.url, &key.raw, 30), calls(&b.url, &key.raw, 30));
    ids.extend(more);
    assert_eq!(ids.len(), 60);
    assert_drained(&sink, &key.id, &tag, &ids, &[&a, &b]).await;

    let spent = field(&budget(&a.url, &key.raw).await, "key", "spent_usd_micros");
    let in_sink: i64 = sink_rows(&sink, &key.id).iter().map(|row| row.2).sum();
    assert_eq!(u64::try_from(in_sink).unwrap(), spent);
    let (code, report) = reconcile(&config).await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        key_row(&report, &key.id),
        (spent, i64::try_from(spent).unwrap(), 0)
    );
    let text = scrape(&a.url).await;
    assert_eq!(
        metric(&text, "tollgate_ledger_undrained_age_seconds"),
        Some(0)
    );
    assert_eq!(metric(&text, "tollgate_ledger_sink_errors_total"), Some(0));
    let drained = metric(&text, "tollgate_ledger_drained_total").unwrap()
        + metric(&scrape(&b.url).await, "tollgate_ledger_drained_total").unwrap();
    assert!(drained >= 60, "{drained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_sink_fails_calls_are_served_and_the_entries_wait_in_redis() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    // The sink's directory does not exist yet: it cannot be opened (a
    // read-only directory would not stop these tests, run as root).
    let sink_dir: PathBuf = dir.path().join("not-yet");
    let sink = sink_dir.join("ledger.db");
    let mut config = setup(&sink);
    config.provider = mock.addr;
    let key = config.keys[0].clone();
    let tag = key.tag();
    let gateway = GatewayProcess::start(&config).await;

    let mut ids = calls(&gateway.url, &key.raw, 10).await;
    let failing = eventually(DRAINED_WITHIN, || async {
        metric(
            &scrape(&gateway.url).await,
            "tollgate_ledger_sink_errors_total",
        )
        .is_some_and(|errors| errors >= 2)
    })
    .await;
    assert!(failing, "no sink error counted:\n{}", gateway.log());
    assert_eq!(stream_length(&tag).await, 10);
    let log = gateway.log();
    assert_eq!(
        log.matches("ledger sink failing").count(),
        1,
        "one warning, not one per attempt:\n{log}"
    );
    assert!(log.contains("does not exist"), "{log}");
    assert!(
        metric(
            &scrape(&gateway.url).await,
            "tollgate_ledger_undrained_age_seconds"
        )
        .is_some(),
        "no undrained age gauge"
    );

    // The sink comes back: everything that waited drains.
    std::fs::create_dir(&sink_dir).unwrap();
    assert_drained(&sink, &key.id, &tag, &ids, &[&gateway]).await;
    // The drain logs its recovery after the rows it wrote are readable.
    let recovered = eventually(DRAINED_WITHIN, || async {
        gateway.log().contains("ledger sink works again")
    })
    .await;
    assert!(recovered, "{}", gateway.log());

    // It fails again while open: every write is refused (a trigger stands
    // in for a full or broken disk), and nothing is trimmed.
    let conn = rusqlite::Connection::open(&sink).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse BEFORE INSERT ON ledger BEGIN SELECT RAISE(ABORT, 'disk on fire'); END;",
    )
    .unwrap();
    let errors_before = metric(
        &scrape(&gateway.url).await,
        "tollgate_ledger_sink_errors_total",
    )
    .unwrap();
    let later = calls(&gateway.url, &key.raw, 5).await;
    let failing = eventually(DRAINED_WITHIN, || async {
        metric(
            &scrape(&gateway.url).await,
            "tollgate_ledger_sink_errors_total",
        )
        .is_some_and(|errors| errors >= errors_before + 2)
    })
    .await;
    assert!(failing, "no sink error counted:\n{}", gateway.log());
    assert_eq!(stream_length(&tag).await, 5);
    assert!(gateway.log().contains("disk on fire"), "{}", gateway.log());

    conn.execute_batch("DROP TRIGGER refuse;").unwrap();
    ids.extend(later);
    assert_drained(&sink, &key.id, &tag, &ids, &[&gateway]).await;
    let (code, report) = reconcile(&config).await;
    assert_eq!(code, Some(0), "{report}");
}
