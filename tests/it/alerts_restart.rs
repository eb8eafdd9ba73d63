//! Spending alerts live in the store: a gateway on SQLite killed (SIGKILL)
//! with an alert still undelivered sends it once it runs again, to a
//! receiver that was down the whole time before.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::common::refusing_port;
use crate::redis_support::*;

/// Serves 200 to every POST on `listener`, keeping the bodies.
fn receive(listener: TcpListener) -> Arc<Mutex<Vec<Value>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let keep = keep.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let keep = keep.clone();
                    async move {
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        keep.lock()
                            .unwrap()
                            .push(serde_json::from_slice::<Value>(&body).unwrap());
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    got
}

async fn metric_value(gateway: &str, series: &str) -> u64 {
    let text = client()
        .get(format!("{gateway}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |value| value.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_alert_survives_a_crash_on_sqlite() {
    let provider = mock().await;
    let dir = tempfile::tempdir().unwrap();
    // Refused until the receiver listens on it.
    let (socket, addr) = refusing_port();
    let key = KeySpec::new("broke", None, "0.00001", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(dir.path().join("books.db"));
    config.keys.push(key.clone());
    // `[alerts]` follows the `[server]` lines; the secret is the
    // provider key's variable, which the test sets for the gateway.
    config.server_extra = format!(
        "\n[alerts]\nwebhook_url = \"http://{addr}/hook\"\nsecret_env = \"TEST_PROVIDER_KEY\"\n"
    );

    let mut gateway = GatewayProcess::start(&config).await;
    let body = chat("gpt-4o-mini", "hi", false, 20);
    let response = post_chat(&client(), &gateway.url, &key.raw, &body).await;
    assert_eq!(response.status(), 402);
    let queued = eventually(Duration::from_secs(10), || async {
        metric_value(
            &gateway.url,
            "tollgate_alerts_queued_total{scope=\"key\",type=\"exhausted\"}",
        )
        .await
            == 1
    })
    .await;
    assert!(queued, "the alert was never queued:\n{}", gateway.log());
    gateway.kill();

    let got = receive(socket.listen(64).unwrap());
    let gateway = GatewayProcess::start(&config).await;
    let delivered = eventually(Duration::from_secs(10), || async {
        !got.lock().unwrap().is_empty()
    })
    .await;
    assert!(delivered, "the alert never came:\n{}", gateway.log());
    let event = got.lock().unwrap()[0].clone();
    assert_eq!(event["type"], "exhausted");
    assert_eq!(event["scope_id"], key.id.as_str());
}
