//! The Redis store over TLS (`rediss://`): a gateway process reserves and
//! settles through a `redis-server` that speaks only TLS to it, the
//! server's certificate checked against the CA of `store.redis_tls_ca_file`.
//! A server whose certificate comes from another CA is refused (the
//! gateway fails closed: `/readyz` 503, calls 503, nothing forwarded), and a
//! server that demands a client certificate (`--tls-auth-clients yes`)
//! serves the gateway that has one and not the gateway without. A Redis
//! Cluster over TLS serves a call too. Every certificate is made here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;

use crate::redis_support::servers::{free_port, redis_cli, RedisServer};
use crate::redis_support::*;

/// How long a gateway that must not reach Redis is watched.
const REFUSED_FOR: Duration = Duration::from_secs(3);

// === Certificates ===

/// A CA of the test's own, and files of certificates it signs.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    file: PathBuf,
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("tollgate test CA {name}"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let file = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&file, cert.pem()).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            file,
        }
    }

    /// A certificate for 127.0.0.1 and localhost, for `usages`: its PEM
    /// files (certificate, key).
    fn sign(
        &self,
        dir: &Path,
        name: &str,
        usages: &[ExtendedKeyUsagePurpose],
    ) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages.to_vec();
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let cert_file = dir.join(format!("{name}.pem"));
        let key_file = dir.join(format!("{name}.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }
}

/// Two CAs (the one the gateways trust, and a stranger), a server
/// certificate from each and a client certificate from the first.
struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    stranger_server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-tls-")
            .tempdir()
            .unwrap();
        let ca = Ca::new(dir.path(), "trusted");
        let stranger = Ca::new(dir.path(), "stranger");
        // A server's certificate is a client's too: cluster nodes present
        // it to each other on the bus.
        let server_usages = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server = ca.sign(dir.path(), "server", &server_usages);
        let stranger_server = stranger.sign(dir.path(), "stranger-server", &server_usages);
        let client = ca.sign(dir.path(), "client", &[ExtendedKeyUsagePurpose::ClientAuth]);
        Pki {
            ca: ca.file,
            server,
            stranger_server,
            client,
            dir,
        }
    }

    /// The `[store]` lines naming the trusted CA, and the client
    /// certificate with `client`.
    fn store_lines(&self, client: bool) -> String {
        let mut lines = format!("redis_tls_ca_file = \"{}\"\n", self.ca.display());
        if client {
            lines.push_str(&format!(
                "redis_tls_cert_file = \"{}\"\nredis_tls_key_file = \"{}\"\n",
                self.client.0.display(),
                self.client.1.display()
            ));
        }
        lines
    }
}

// === Servers ===

/// A `redis-server` answering plain PING on `server.port` (for the test's
/// own reads) and TLS on the returned port (for the gateways).
fn tls_redis(
    pki: &Pki,
    server_cert: &(PathBuf, PathBuf),
    auth_clients: bool,
) -> (RedisServer, u16) {
    let tls_port = free_port(false).to_string();
    let cert = server_cert.0.to_string_lossy().into_owned();
    let key = server_cert.1.to_string_lossy().into_owned();
    let ca = pki.ca.to_string_lossy().into_owned();
    let auth = if auth_clients { "yes" } else { "no" };
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        auth,
    ]);
    (server, tls_port.parse().unwrap())
}

/// Whether a client of the server is connected to its TLS port.
fn has_client_on(plain_port: u16, tls_port: u16) -> bool {
    redis_cli(plain_port, &["client", "list"])
        .lines()
        .any(|line| line.contains(&format!("laddr=127.0.0.1:{tls_port} ")))
}

// === Calls ===

fn gateway_config(url: &str, provider: std::net::SocketAddr, store: String) -> GatewayConfig {
    let org = OrgSpec {
        id: unique("org"),
        cap: "10.00",
        period: "month",
    };
    let key = KeySpec::new("tls", Some(&org), "5.00", "day");
    let mut config = GatewayConfig::new(url, provider);
    config.orgs.push(org);
    config.keys.push(key);
    config.store_extra = store;
    config
}

async fn small_call(gateway: &str, key: &str) -> (u16, Value) {
    let body = chat("gpt-4o-mini", "hello mock:tokens=7", false, 50);
    let response = post_chat(&client(), gateway, key, &body).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Watches a gateway that must not reach its Redis: `/readyz` stays 503,
/// a call gets 503 without reaching the provider, and the log says `why`.
async fn assert_fails_closed(
    gateway: &GatewayProcess,
    key: &str,
    mock: &tollgate_mock::MockServer,
    why: &str,
) {
    let forwarded = mock.stats.requests();
    let deadline = Instant::now() + REFUSED_FOR;
    while Instant::now() < deadline {
        assert_eq!(readyz(&gateway.url).await, 503, "{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = small_call(&gateway.url, key).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "budget_store_unavailable", "{body}");
    assert_eq!(
        mock.stats.requests(),
        forwarded,
        "forwarded without a store"
    );
    let log = gateway.log();
    assert!(log.contains(why), "the log does not say {why}:\n{log}");
}

/// A call through `gateway` is charged: 200, the provider answered once,
/// the key's spent moved and nothing stays reserved.
async fn assert_call_charged(
    gateway: &GatewayProcess,
    key: &str,
    mock: &tollgate_mock::MockServer,
) {
    let forwarded = mock.stats.requests();
    let (status, body) = small_call(&gateway.url, key).await;
    assert_eq!(status, 200, "{body}\n{}", gateway.log());
    assert_eq!(mock.stats.requests(), forwarded + 1);
    let cost = prices()
        .get("gpt-4o-mini")
        .unwrap()
        .cost(&chat_usage(&body));
    assert!(cost > 0);
    let budget = budget(&gateway.url, key).await;
    assert_eq!(field(&budget, "key", "spent_usd_micros"), cost, "{budget}");
    assert_eq!(field(&budget, "key", "reserved_usd_micros"), 0, "{budget}");
}

// === Tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_reserved_and_settled_over_tls() {
    let pki = Pki::new();
    let (redis, tls_port) = tls_redis(&pki, &pki.server, false);
    let mock = mock().await;
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let config = gateway_config(&url, mock.addr, pki.store_lines(false));
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start(&config).await;
    assert_call_charged(&gateway, &key, &mock).await;
    assert!(
        has_client_on(redis.port, tls_port),
        "the gateway is not connected to the TLS port"
    );
    // The books, read on the plain port, balance.
    let books = store(&redis.url()).await;
    let rows = assert_books_balance(&books, &config.tags()).await;
    assert!(rows.iter().any(|row| row.counter > 0), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_an_unknown_ca_is_refused() {
    let pki = Pki::new();
    let (_redis, tls_port) = tls_redis(&pki, &pki.stranger_server, false);
    let mock = mock().await;
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let config = gateway_config(&url, mock.addr, pki.store_lines(false));
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start_unready(&config).await;
    assert_fails_closed(
        &gateway,
        &key,
        &mock,
        "invalid peer certificate: UnknownIssuer",
    )
    .await;
    assert_eq!(mock.stats.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_demanding_a_client_certificate_serves_only_the_gateway_with_one() {
    let pki = Pki::new();
    let (redis, tls_port) = tls_redis(&pki, &pki.server, true);
    let mock = mock().await;
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let without = gateway_config(&url, mock.addr, pki.store_lines(false));
    let with = gateway_config(&url, mock.addr, pki.store_lines(true));
    let (without_gateway, with_gateway) = tokio::join!(
        GatewayProcess::start_unready(&without),
        GatewayProcess::start(&with)
    );

    assert_call_charged(&with_gateway, &with.keys[0].raw, &mock).await;
    assert!(has_client_on(redis.port, tls_port));

    let key = &without.keys[0].raw;
    assert_fails_closed(&without_gateway, key, &mock, "CertificateRequired").await;
}

// === Cluster ===

/// `redis-cli` over TLS with the client certificate.
fn tls_cli(pki: &Pki, port: u16) -> Command {
    let mut cli = Command::new("redis-cli");
    cli.args(["--tls", "--cacert"])
        .arg(&pki.ca)
        .arg("--cert")
        .arg(&pki.client.0)
        .arg("--key")
        .arg(&pki.client.1)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null());
    cli
}

/// What `redis-cli` over TLS prints for `args` on the node at `port`.
fn tls_cli_output(pki: &Pki, port: u16, args: &[&str]) -> Option<String> {
    let output = tls_cli(pki, port).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether every node serves all 16384 slots and they all tell the same
/// slot map. `cluster_state:ok` on each node is not enough: one node can
/// reach it while another still lacks part of the slot map, and the
/// gateway would start on a cluster still settling.
fn slot_map_agreed(pki: &Pki, ports: &[u16]) -> bool {
    let slot_map = |port: u16| {
        let info = tls_cli_output(pki, port, &["cluster", "info"])?;
        let serving = ["cluster_state:ok", "cluster_slots_ok:16384"]
            .iter()
            .all(|want| info.lines().any(|line| line.trim() == *want));
        if !serving {
            return None;
        }
        tls_cli_output(pki, port, &["cluster", "slots"])
    };
    let mut maps = ports.iter().map(|&port| slot_map(port));
    match maps.next() {
        Some(Some(first)) => maps.all(|map| map.as_ref() == Some(&first)),
        _ => false,
    }
}

/// Three cluster nodes speaking only TLS, to clients and to each other
/// (`--tls-cluster yes`), joined into one cluster; killed when dropped.
struct TlsCluster {
    _nodes: Vec<RedisServer>,
    tls_ports: Vec<u16>,
}

impl TlsCluster {
    fn start(pki: &Pki) -> TlsCluster {
        let dir = pki.dir.path();
        let cert = pki.server.0.to_string_lossy().into_owned();
        let key = pki.server.1.to_string_lossy().into_owned();
        let ca = pki.ca.to_string_lossy().into_owned();
        let mut nodes = Vec::new();
        let mut tls_ports = Vec::new();
        for _ in 0..3 {
            // The bus of a TLS cluster is on the TLS port + 10000.
            let tls_port = free_port(true);
            let port = tls_port.to_string();
            let config = dir.join(format!("nodes-{tls_port}.conf"));
            let config = config.to_string_lossy().into_owned();
            let node = RedisServer::start_with(&[
                "--tls-port",
                &port,
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-cluster",
                "yes",
                "--tls-auth-clients",
                "no",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &config,
            ]);
            nodes.push(node);
            tls_ports.push(tls_port);
        }
        let mut create = tls_cli(pki, tls_ports[0]);
        create.args(["--cluster", "create"]);
        for port in &tls_ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let mut create = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // It waits for ever if the nodes cannot meet on their TLS bus.
        let deadline = Instant::now() + Duration::from_secs(30);
        let created = loop {
            if let Some(status) = create.try_wait().unwrap() {
                break status.success();
            }
            if Instant::now() >= deadline {
                let _ = create.kill();
                let _ = create.wait();
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(created, "redis-cli --cluster create over TLS failed");
        while !slot_map_agreed(pki, &tls_ports) {
            assert!(
                Instant::now() < deadline,
                "the TLS cluster never agreed on its slot map"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        TlsCluster {
            _nodes: nodes,
            tls_ports,
        }
    }

    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .tls_ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("rediss+cluster://{}", hosts.join(","))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_reserved_and_settled_on_a_redis_cluster_over_tls() {
    let pki = Arc::new(Pki::new());
    let starter = pki.clone();
    let cluster = tokio::task::spawn_blocking(move || TlsCluster::start(&starter))
        .await
        .unwrap();
    let mock = mock().await;
    let config = gateway_config(&cluster.url(), mock.addr, pki.store_lines(true));
    let key = config.keys[0].raw.clone();
    let gateway = GatewayProcess::start(&config).await;
    assert_call_charged(&gateway, &key, &mock).await;
}
