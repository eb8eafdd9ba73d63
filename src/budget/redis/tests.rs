//! Tests of the Redis store's own behaviour: the Lua period ids against
//! [`Period::id_at`], script reloading, retries after timeouts, start-up
//! and recovery while Redis is down, the admin records' version read and
//! retried writes; the store epoch in `epoch`, closed records in
//! `closed`. The protocol itself is covered by the contract suite in
//! `budget::contract`.

mod closed;
mod customers;
mod drain;
mod epoch;

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};

use super::testing::{
    cluster, cluster_url, free_port, redis_cli, shared_url, Cluster, RedisServer,
};
use super::*;
use crate::budget::records::{RecordKind, RecordWrite, WriteOutcome};
use crate::budget::{LedgerStatus, Period, Upkeep, DEFAULT_LEDGER_RETENTION};
use crate::budget::{Records, Reports, SpendQuery};
use crate::usage::Usage;

const PERIODS: [Period; 6] = [
    Period::Minute,
    Period::Hour,
    Period::Day,
    Period::Week,
    Period::Month,
    Period::Total,
];

/// A plain connection without a response timeout (`DEBUG SLEEP` waits).
async fn raw_connection(url: &str) -> ::redis::aio::MultiplexedConnection {
    let config = ::redis::AsyncConnectionConfig::new().set_response_timeout(None);
    ::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

fn key_scope(cap: UsdMicros) -> Scope {
    Scope {
        kind: ScopeKind::Key,
        id: unique("key"),
        cap,
        period: Period::Day,
    }
}

fn request(key: &Scope, amount: UsdMicros) -> ReserveRequest {
    ReserveRequest {
        exec_id: uuid::Uuid::now_v7().to_string(),
        key: key.clone(),
        org: None,
        model: "gpt-4o-mini".to_owned(),
        amount,
        min_amount: amount,
        run: None,
        caps: Vec::new(),
        tokens: 0,
        customer: None,
        ttl: Duration::from_secs(60),
    }
}

fn settlement(req: &ReserveRequest, actual: UsdMicros) -> Settlement {
    Settlement {
        exec_id: req.exec_id.clone(),
        key: req.key.id.clone(),
        org: None,
        model: "gpt-4o-mini".to_owned(),
        usage: Usage {
            input: 10,
            cached_input: 0,
            cache_write: 0,
            output: 5,
            ..Usage::default()
        },
        actual,
        estimated: false,
    }
}

/// Instants around every edge a period id has: year ends (ISO weeks 52,
/// 53 and 01), month ends, leap days, plus a spread of others.
fn instants() -> Vec<DateTime<Utc>> {
    let mut instants = Vec::new();
    for year in (1970..=2100).chain([2400]) {
        for (month, day) in [
            (12, 28),
            (12, 29),
            (12, 30),
            (12, 31),
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
        ] {
            let date = Utc.with_ymd_and_hms(year, month, day, 0, 0, 0).unwrap();
            instants.push(date);
            instants.push(date + chrono::TimeDelta::seconds(86_399));
        }
        for (month, day) in [(2, 28), (2, 29), (3, 1), (6, 30), (7, 1)] {
            if let chrono::LocalResult::Single(date) =
                Utc.with_ymd_and_hms(year, month, day, 23, 59, 59)
            {
                instants.push(date);
            }
        }
    }
    // A deterministic spread over 1970..2200, including sub-second times.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..3_000 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let ms = (seed >> 11) % 7_258_118_400_000;
        instants.push(DateTime::from_timestamp_millis(i64::try_from(ms).unwrap()).unwrap());
    }
    instants
}

#[tokio::test]
async fn lua_period_ids_match_period_id_at() {
    let body = "local out = {}\n\
        for i = 1, #ARGV do\n\
          for _, p in ipairs({'minute', 'hour', 'day', 'week', 'month', 'total'}) do\n\
            out[#out + 1] = period_id(p, tonumber(ARGV[i]))\n\
          end\n\
        end\n\
        return out\n";
    let script = ::redis::Script::new(&format!("{}\n{body}", scripts::COMMON));
    let mut conn = raw_connection(shared_url()).await;
    let instants = instants();
    for chunk in instants.chunks(1_000) {
        let mut invocation = script.prepare_invoke();
        for instant in chunk {
            invocation.arg(instant.timestamp_millis());
        }
        let ids: Vec<String> = invocation.invoke_async(&mut conn).await.unwrap();
        let expected: Vec<String> = chunk
            .iter()
            .flat_map(|instant| PERIODS.map(|period| period.id_at(*instant)))
            .collect();
        for (i, (lua, rust)) in ids.iter().zip(&expected).enumerate() {
            assert_eq!(lua, rust, "at {}", chunk[i / PERIODS.len()]);
        }
        assert_eq!(ids.len(), expected.len());
    }
}

/// A test build's scripts take the clock offset off the end of ARGV, so
/// the body reads the ARGV its header states, on a shifted clock.
#[tokio::test]
async fn the_test_clock_shifts_the_time_and_leaves_the_argv_as_stated() {
    const DAY_MS: i64 = 86_400_000;
    let body = "return { fmt(store_now()), unpack(ARGV) }";
    let script = ::redis::Script::new(&format!(
        "{}\n{}\n{body}",
        scripts::COMMON,
        scripts::TEST_CLOCK
    ));
    let mut conn = raw_connection(shared_url()).await;
    let (secs, micros): (i64, i64) = ::redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let before = secs * 1_000 + micros / 1_000;
    for offset in [DAY_MS, -DAY_MS] {
        let reply: Vec<String> = script
            .prepare_invoke()
            .arg("a")
            .arg("")
            .arg(offset)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(reply[1..], ["a", ""]);
        let shifted: i64 = reply[0].parse().unwrap();
        let elapsed = shifted - offset - before;
        assert!((0..10_000).contains(&elapsed), "{reply:?} from {before}");
    }
}

#[tokio::test]
async fn scripts_are_loaded_again_after_script_flush() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Rules::default())
        .await
        .unwrap();
    let key = key_scope(1_000);
    let first = request(&key, 100);
    assert!(store.reserve(&first).await.unwrap().is_reserved());

    let mut admin = raw_connection(&server.url()).await;
    let _: () = ::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    let sha = store.inner.scripts.reserve.get_hash().to_owned();
    let exists: Vec<bool> = ::redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(exists, [false]);

    let second = request(&key, 200);
    assert!(store.reserve(&second).await.unwrap().is_reserved());
    assert_eq!(
        store.settle(&settlement(&first, 100)).await.unwrap().actual,
        100
    );
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (100, 200));
}

/// Makes the server at `url` stall for 0.6 s from (about) now; the task
/// ends when it answers again.
async fn stall(url: &str) -> tokio::task::JoinHandle<()> {
    let mut admin = raw_connection(url).await;
    let stalled = tokio::spawn(async move {
        let _: () = ::redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.6")
            .query_async(&mut admin)
            .await
            .unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    stalled
}

/// `INFO commandstats` of the server at `url`.
async fn commandstats(url: &str) -> String {
    let mut admin = raw_connection(url).await;
    ::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .unwrap()
}

/// How many EVALSHA calls the server at `url` has run.
async fn evalsha_calls(url: &str) -> u64 {
    command_calls(url, "evalsha").await
}

/// How many `command` calls (lower case) the server at `url` has run,
/// those inside scripts included.
async fn command_calls(url: &str, command: &str) -> u64 {
    let info = commandstats(url).await;
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// Commands of every kind the server at `url` has run, those inside
/// scripts included, less the `INFO` calls that read them.
async fn all_command_calls(url: &str) -> u64 {
    commandstats(url)
        .await
        .lines()
        .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info:"))
        .filter_map(|line| line.split_once(":calls=")?.1.split(',').next())
        .map(|calls| calls.parse::<u64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_costs_twenty_commands() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Rules::default())
        .await
        .unwrap();
    let key = key_scope(1_000_000);
    // The first call marks the tag's epoch and runs its lazy sweep.
    let first = request(&key, 100);
    store.reserve(&first).await.unwrap();
    store.settle(&settlement(&first, 90)).await.unwrap();

    let calls = 20;
    let before = all_command_calls(&server.url()).await;
    let increments = command_calls(&server.url(), "hincrby").await;
    let reads = command_calls(&server.url(), "hget").await;
    let started = Instant::now();
    for _ in 0..calls {
        let req = request(&key, 100);
        store.reserve(&req).await.unwrap();
        store.settle(&settlement(&req, 90)).await.unwrap();
    }
    let elapsed = started.elapsed();
    let commands = all_command_calls(&server.url()).await - before;
    // Reserve: EVALSHA, TIME, the counters' HMGET, the record's HGET, the
    // counters' HSET, the record's HSET (written last, so a script cut
    // short leaves headroom held, never a record without its hold), the
    // deadline's ZADD. Settle: EVALSHA, the record's HGET, TIME, the counters' HMGET and
    // HSET, ZREM, XADD, four HINCRBYs of its aggregate row (calls, input,
    // output, cost), the closed record's HSET and its RPUSH. A lazy sweep
    // (once a second per tag) adds a few more.
    let sweeps = elapsed.as_secs() + 1;
    assert!(
        commands <= 20 * calls + 8 * sweeps,
        "{commands} commands for {calls} calls in {elapsed:?}"
    );
    assert!(
        commands >= 20 * calls,
        "{commands} commands for {calls} calls"
    );
    assert_eq!(
        command_calls(&server.url(), "hincrby").await - increments,
        4 * calls
    );
    assert_eq!(
        command_calls(&server.url(), "hget").await - reads,
        2 * calls,
        "a reserve and a settle read the record once each"
    );
    // And the row holds every call.
    let rows = store
        .spend(&SpendQuery {
            from: Utc::now().date_naive() - chrono::Days::new(1),
            to: Utc::now().date_naive() + chrono::Days::new(1),
            key: Some(key.id.clone()),
            org: None,
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].calls, calls + 1);
    assert_eq!(rows[0].input_tokens, 10 * (calls + 1));
    assert_eq!(rows[0].output_tokens, 5 * (calls + 1));
    assert_eq!(rows[0].cost_usd_micros, 90 * (calls as i64 + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_of_unknown_outcome_is_settled_without_a_search() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Rules::default())
        .await
        .unwrap();
    for i in 0..50 {
        store.track_key(&format!("other-{i}"), None);
    }
    let key = key_scope(1_000);
    store.reserve(&request(&key, 1)).await.unwrap();
    let never_reserved = settlement(&request(&key, 100), 0);

    // A settle of an exec id nowhere to be found looks under every tag the
    // store knows, to tell a forged owner from an unknown id.
    let before = command_calls(&server.url(), "hget").await;
    assert!(matches!(
        store.settle(&never_reserved).await,
        Err(StoreError::UnknownReservation(_))
    ));
    assert!(command_calls(&server.url(), "hget").await - before >= 50);

    // A settle for a reserve that may never have landed does not.
    let before = command_calls(&server.url(), "hget").await;
    assert!(matches!(
        store.settle_if_reserved(&never_reserved).await,
        Err(StoreError::UnknownReservation(_))
    ));
    assert!(command_calls(&server.url(), "hget").await - before <= 1);

    // One that landed is settled as usual.
    let landed = request(&key, 100);
    store.reserve(&landed).await.unwrap();
    let outcome = store
        .settle_if_reserved(&settlement(&landed, 0))
        .await
        .unwrap();
    assert!(outcome.applied);
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_timed_out_is_retried_and_applies_once() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let policy = CallPolicy {
        timeout: Duration::from_millis(150),
        attempts: 20,
        first_backoff: Duration::from_millis(20),
    };
    let store = RedisStore::with_policy(&server.url(), Rules::default(), policy).unwrap();
    let key = key_scope(1_000);
    // Load the scripts first, so the stalled attempts are the real calls.
    store.reserve(&request(&key, 1)).await.unwrap();

    // Redis stalls; the first attempts time out while queued, then all of
    // them run: the first reserves, the rest find the record.
    let req = request(&key, 300);
    let calls_before = evalsha_calls(&server.url()).await;
    let stalled = stall(&server.url()).await;
    assert!(store.reserve(&req).await.unwrap().is_reserved());
    stalled.await.unwrap();
    assert!(
        evalsha_calls(&server.url()).await - calls_before >= 2,
        "no retry"
    );
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (0, 301));

    let calls_before = evalsha_calls(&server.url()).await;
    let stalled = stall(&server.url()).await;
    let outcome = store.settle(&settlement(&req, 250)).await.unwrap();
    stalled.await.unwrap();
    assert!(
        evalsha_calls(&server.url()).await - calls_before >= 2,
        "no retry"
    );
    // The attempt that applied it timed out; the retry still reports this
    // call as the one that applied it.
    assert!(outcome.applied);
    assert_eq!(outcome.status, LedgerStatus::Ok);
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (250, 1));
    let tag = tag_for(None, &key.id);
    assert_eq!(store.ledger(&tag).await.unwrap().len(), 1);
    // A later settle of the same exec id is a repeat, not this call.
    let again = store.settle(&settlement(&req, 250)).await.unwrap();
    assert!(!again.applied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_reserve_retried_after_a_timeout_is_no_duplicate() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let policy = CallPolicy {
        timeout: Duration::from_millis(150),
        attempts: 20,
        first_backoff: Duration::from_millis(20),
    };
    let store = RedisStore::with_policy(&server.url(), Rules::default(), policy).unwrap();
    let key = key_scope(1_000);
    store.reserve(&request(&key, 1)).await.unwrap();

    // The first attempt reserves and takes the claim; the later attempts
    // find their own exec id's record, not a duplicate.
    let claim = uuid::Uuid::now_v7().simple().to_string();
    let req = request(&key, 300);
    let calls_before = evalsha_calls(&server.url()).await;
    let stalled = stall(&server.url()).await;
    let outcome = store.reserve_claimed(&req, &claim).await.unwrap();
    stalled.await.unwrap();
    assert!(
        evalsha_calls(&server.url()).await - calls_before >= 2,
        "no retry"
    );
    assert!(matches!(
        outcome,
        ClaimedReserve::Ran(ReserveOutcome::Reserved { .. })
    ));
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (0, 301));
    // Another request under the claim is the duplicate.
    assert_eq!(
        store
            .reserve_claimed(&request(&key, 300), &claim)
            .await
            .unwrap(),
        ClaimedReserve::Duplicate
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_while_redis_is_down_and_recovers_when_it_returns() {
    let port = free_port(false);
    let url = format!("redis://127.0.0.1:{port}");
    let store = RedisStore::connect(&url, Rules::default()).await.unwrap();
    let key = key_scope(1_000);
    assert!(store.ping().await.is_err());
    assert!(matches!(
        store.reserve(&request(&key, 100)).await,
        Err(StoreError::Unavailable(_) | StoreError::Timeout)
    ));

    // Every write on disk before its reply: SIGKILL then loses nothing,
    // however slow the disk (`everysec` may hold writes back).
    let mut server =
        RedisServer::stopped_on(port, &["--appendonly", "yes", "--appendfsync", "always"]);
    server.restart();
    await_ping(&store).await;
    let req = request(&key, 100);
    assert!(store.reserve(&req).await.unwrap().is_reserved());

    // A restart loses the scripts (not the data, kept in the append-only
    // file): the store reconnects and loads them again.
    server.kill();
    assert!(store.ping().await.is_err());
    server.restart();
    await_ping(&store).await;
    assert!(store
        .reserve(&request(&key, 100))
        .await
        .unwrap()
        .is_reserved());
    assert_eq!(store.scope_state(&key).await.unwrap().reserved, 200);
}

async fn await_ping(store: &RedisStore) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.ping().await.is_err() {
        assert!(Instant::now() < deadline, "the store never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn amounts_of_2_to_the_53_are_refused_before_anything_is_written() {
    let store = RedisStore::connect(shared_url(), Rules::default())
        .await
        .unwrap();
    let key = key_scope(1_000);
    let too_big = request(&key, 1 << 53);
    // The script's own refusal: an answer, not an outage, never retried.
    let refused = store.reserve(&too_big).await;
    assert!(
        matches!(&refused, Err(StoreError::Refused(message)) if message.contains("2^53")),
        "{refused:?}"
    );
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (0, 0));
    assert!(store
        .ledger(&tag_for(None, &key.id))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_malformed_url_is_the_only_connect_error() {
    assert!(RedisStore::connect("redis+cluster://", Rules::default())
        .await
        .is_err());
    assert!(RedisStore::connect("no scheme", Rules::default())
        .await
        .is_err());
    assert!(matches!(
        RedisStore::connect("rediss://127.0.0.1:6379/#insecure", Rules::default()).await,
        Err(RedisUrlError::Insecure)
    ));
    let store = RedisStore::connect("redis://user:secret@127.0.0.1:1", Rules::default())
        .await
        .unwrap();
    assert_eq!(store.endpoint(), "redis://127.0.0.1:1");
    assert!(!format!("{store:?}").contains("secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_starts_while_the_cluster_is_down() {
    let ports: Vec<u16> = (0..3).map(|_| free_port(true)).collect();
    let store = RedisStore::connect(&cluster_url(ports.clone()), Rules::default())
        .await
        .unwrap();
    assert!(store.ping().await.is_err());

    let _cluster = tokio::task::spawn_blocking(move || Cluster::start_on(&ports))
        .await
        .unwrap();
    await_ping(&store).await;
    let key = key_scope(1_000);
    assert!(store
        .reserve(&request(&key, 100))
        .await
        .unwrap()
        .is_reserved());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scripts_are_loaded_again_after_script_flush() {
    let cluster = tokio::task::spawn_blocking(cluster).await.unwrap();
    let store = RedisStore::connect(&cluster.url(), Rules::default())
        .await
        .unwrap();
    // Keys spread over the slots, so every primary needs the scripts.
    let keys: Vec<Scope> = (0..12).map(|_| key_scope(1_000)).collect();
    for key in &keys {
        store.reserve(&request(key, 10)).await.unwrap();
    }
    for port in cluster.ports() {
        assert_eq!(redis_cli(port, &["script", "flush"]).trim(), "OK");
    }
    for key in &keys {
        assert!(store
            .reserve(&request(key, 10))
            .await
            .unwrap()
            .is_reserved());
        let state = store.scope_state(key).await.unwrap();
        assert_eq!(state.reserved, 20);
    }
}

fn record_write(id: &str, expect: Option<u64>) -> RecordWrite {
    RecordWrite {
        kind: RecordKind::Key,
        id: id.to_owned(),
        expect,
        body: r#"{"name":"a key"}"#.to_owned(),
        audit: r#"{"action":"write"}"#.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_version_is_one_get() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Rules::default())
        .await
        .unwrap();
    store.write_record(&record_write("k", None)).await.unwrap();
    let url = server.url();
    let (gets, scripts, meta_reads) = (
        command_calls(&url, "get").await,
        evalsha_calls(&url).await,
        command_calls(&url, "hgetall").await,
    );
    for _ in 0..10 {
        assert_eq!(store.records_version().await.unwrap(), 1);
    }
    assert_eq!(command_calls(&url, "get").await - gets, 10);
    assert_eq!(evalsha_calls(&url).await, scripts);
    assert_eq!(command_calls(&url, "hgetall").await, meta_reads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_write_that_timed_out_is_retried_and_applies_once() {
    let server = RedisServer::start();
    let policy = CallPolicy {
        timeout: Duration::from_millis(150),
        attempts: 20,
        first_backoff: Duration::from_millis(20),
    };
    let store = RedisStore::with_policy(&server.url(), Rules::default(), policy).unwrap();
    // Load the script first, so the held attempts are the real calls.
    store
        .write_record(&record_write("warm", None))
        .await
        .unwrap();

    // Redis holds every write (a script may write) for 0.6 s, but not the
    // read of tg:meta before it: the first attempts time out while held,
    // then all of them run. The retry finds its own call's write and
    // answers as it did, not as a conflict with itself.
    let calls_before = evalsha_calls(&server.url()).await;
    let mut admin = raw_connection(&server.url()).await;
    let _: () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let outcome = store.write_record(&record_write("k", None)).await.unwrap();
    assert!(
        evalsha_calls(&server.url()).await - calls_before >= 2,
        "no retry"
    );
    assert_eq!(
        outcome,
        WriteOutcome::Written {
            revision: 1,
            version: 2
        }
    );
    assert_eq!(store.records_version().await.unwrap(), 2);
    assert_eq!(store.audit(None, 10).await.unwrap().len(), 2);
    // Another call of the same write is another writer: a conflict.
    assert_eq!(
        store.write_record(&record_write("k", None)).await.unwrap(),
        WriteOutcome::Conflict { current: Some(1) }
    );
}
