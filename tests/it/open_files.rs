//! At the common soft limit of 1,024 open files, 1,100 silent connections
//! used to starve the gateway: `accept` failed with "Too many open files"
//! and calls and `/healthz` timed out. The gateway raises its soft limit
//! to the hard one at start-up and logs it, so they are merely held.

use std::time::Duration;

use tokio::net::TcpStream;

use crate::redis_support::*;

const SILENT: usize = 1_100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eleven_hundred_silent_connections_at_a_1024_soft_limit_starve_nothing() {
    // This process holds the silent connections, beside every other
    // test's: it needs the room too.
    crate::limits::raise_open_files();
    let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap();
    assert!(soft >= 4_096, "this machine's hard limit is {hard}");

    let provider = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let key = KeySpec::new("gil", None, "1.00", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(dir.path().join("books.db"));
    config.keys.push(key.clone());
    let gateway =
        GatewayProcess::start_under(&config, &["prlimit", "--nofile=1024:4096", "--"]).await;
    assert!(
        gateway.log().contains("limit=4096"),
        "the gateway did not raise its soft limit:\n{}",
        gateway.log()
    );

    let addr = gateway.url.trim_start_matches("http://").to_owned();
    let mut silent = Vec::with_capacity(SILENT);
    for _ in 0..SILENT {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    assert_eq!(readyz(&gateway.url).await, 200);
    let body = chat("gpt-4o-mini", "hi mock:tokens=3", false, 10);
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        post_chat(&client(), &gateway.url, &key.raw, &body),
    )
    .await
    .expect("a call timed out behind the silent connections");
    assert_eq!(response.status(), 200);
    assert!(
        !gateway.log().contains("Too many open files"),
        "{}",
        gateway.log()
    );
    drop(silent);
}

/// At a hard limit of 1,024 open files, which the gateway cannot raise,
/// 1,100 connections that send nothing would take every descriptor until
/// their header-read timeout (a minute here). The gateway closes the ones
/// silent longest to make room, and a real call is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_hard_1024_limit_silent_connections_make_room_for_a_real_call() {
    crate::limits::raise_open_files();
    let provider = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let key = KeySpec::new("hal", None, "1.00", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(dir.path().join("books.db"));
    config.server_extra = "header_read_timeout_secs = 60".to_owned();
    config.keys.push(key.clone());
    let gateway =
        GatewayProcess::start_under(&config, &["prlimit", "--nofile=1024:1024", "--"]).await;

    let addr = gateway.url.trim_start_matches("http://").to_owned();
    let mut silent = Vec::with_capacity(SILENT);
    for _ in 0..SILENT {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    let body = chat("gpt-4o-mini", "hi mock:tokens=3", false, 10);
    let started = std::time::Instant::now();
    // Far below the minute the silent connections would otherwise hold
    // their descriptors.
    let response = tokio::time::timeout(
        Duration::from_secs(15),
        post_chat(&client(), &gateway.url, &key.raw, &body),
    )
    .await
    .expect("a call waited behind the silent connections");
    assert_eq!(response.status(), 200, "{}", gateway.log());
    eprintln!("served in {:?}", started.elapsed());
    assert_eq!(readyz(&gateway.url).await, 200);
    drop(silent);
}
