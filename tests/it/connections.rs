//! What the server does with connections themselves, spoken over raw TCP
//! where an HTTP client would hide it: hop-by-hop headers stay on their
//! hop, an early error leaves a keep-alive connection usable, and slow,
//! idle or surplus connections are closed.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::common::*;

/// One response read off a connection: status, lower-cased headers, body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response with a `content-length` body; `None` if the
/// connection closed first.
async fn read_answer(reader: &mut BufReader<TcpStream>) -> Option<Answer> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let status = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await.ok()?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':')?;
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some(Answer {
        status,
        headers,
        body,
    })
}

fn post(path: &str, extra_headers: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n{extra_headers}\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

async fn connect(h: &Harness) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(h.addr).await.unwrap())
}

#[tokio::test]
async fn headers_named_in_connection_do_not_reach_the_provider() {
    let h = start(Setup::default()).await;
    let mut conn = connect(&h).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let request = post(
        "/v1/chat/completions",
        &format!(
            "authorization: Bearer {ALICE}\r\nconnection: keep-alive, X-Hop-Secret\r\n\
             x-hop-secret: s3cret\r\nx-end-to-end: visible\r\n"
        ),
        body.to_string().as_bytes(),
    );
    conn.get_mut().write_all(&request).await.unwrap();
    let answer = read_answer(&mut conn).await.unwrap();
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let seen = h.mock.stats.last_request().unwrap().headers;
    assert!(!seen.contains_key("x-hop-secret"), "{seen:?}");
    assert_eq!(seen["x-end-to-end"], "visible");
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").into_bytes()
}

/// A 5 KB chat request body.
fn five_kb_body() -> Vec<u8> {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(5000)}]})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn a_refusal_before_the_body_leaves_the_connection_usable() {
    let h = start(Setup::default()).await;
    let cases: [(&str, &str, u16); 3] = [
        // No key: refused before the body is read.
        ("/v1/chat/completions", "", 401),
        ("/v1/messages/count_tokens", "", 401),
        // No such route.
        ("/v1/nowhere", "", 404),
    ];
    for (path, headers, status) in cases {
        let mut conn = connect(&h).await;
        let body = five_kb_body();
        // The head first, then the body a moment later, as a client whose
        // body is not in the first packet.
        let request = post(path, headers, &body);
        let split = request.len() - body.len();
        conn.get_mut().write_all(&request[..split]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        conn.get_mut().write_all(&request[split..]).await.unwrap();
        let first = read_answer(&mut conn).await.unwrap();
        assert_eq!(first.status, status, "{path}");
        assert_ne!(first.header("connection"), Some("close"), "{path}");
        conn.get_mut().write_all(&get("/healthz")).await.unwrap();
        let second = read_answer(&mut conn)
            .await
            .unwrap_or_else(|| panic!("{path}: connection closed after the refusal"));
        assert_eq!(second.status, 200, "{path}");
    }
}

#[tokio::test]
async fn a_refused_body_too_large_to_drain_closes_the_connection_cleanly() {
    let h = start(Setup::default()).await;
    let mut conn = connect(&h).await;
    // Declares 512 KiB and sends none of it.
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\n\
                content-type: application/json\r\ncontent-length: 524288\r\n\r\n";
    conn.get_mut().write_all(head.as_bytes()).await.unwrap();
    let answer = read_answer(&mut conn).await.unwrap();
    assert_eq!(answer.status, 401);
    assert_eq!(answer.header("connection"), Some("close"));
}

/// Whether the server closes `conn` within `within`; bytes it sends first
/// are read and dropped.
async fn closed_within(conn: &mut BufReader<TcpStream>, within: Duration) -> bool {
    let mut sink = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match conn.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_disconnected() {
    let h = start(Setup {
        server_extra: "header_read_timeout_secs = 1",
        ..Setup::default()
    })
    .await;
    let mut conn = connect(&h).await;
    let started = std::time::Instant::now();
    let head = get("/healthz");
    let mut cut = false;
    // One byte every 300 ms: the whole head would take 10 s.
    for byte in &head {
        if conn.get_mut().write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        if closed_within(&mut conn, Duration::from_millis(300)).await {
            cut = true;
            break;
        }
    }
    assert!(cut, "the trickled head was read to its end");
    let after = started.elapsed();
    assert!(after >= Duration::from_millis(900), "{after:?}");
    assert!(after < Duration::from_secs(3), "{after:?}");
}

#[tokio::test]
async fn a_silent_connection_is_disconnected_after_the_header_timeout() {
    let h = start(Setup {
        server_extra: "header_read_timeout_secs = 1\nidle_timeout_secs = 60",
        ..Setup::default()
    })
    .await;
    let mut conn = connect(&h).await;
    assert!(closed_within(&mut conn, Duration::from_secs(3)).await);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let h = start(Setup {
        server_extra: "header_read_timeout_secs = 30\nidle_timeout_secs = 2",
        ..Setup::default()
    })
    .await;
    let mut conn = connect(&h).await;
    conn.get_mut().write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_answer(&mut conn).await.unwrap().status, 200);
    // Still open within the idle timeout, and reusable.
    assert!(!closed_within(&mut conn, Duration::from_millis(1200)).await);
    conn.get_mut().write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_answer(&mut conn).await.unwrap().status, 200);
    let idle = std::time::Instant::now();
    assert!(closed_within(&mut conn, Duration::from_secs(5)).await);
    let after = idle.elapsed();
    assert!(after >= Duration::from_millis(1800), "{after:?}");
}

#[tokio::test]
async fn a_call_in_flight_outlasts_the_idle_timeout() {
    let h = start(Setup {
        server_extra: "header_read_timeout_secs = 1\nidle_timeout_secs = 1",
        mock: tollgate_mock::MockOptions {
            expect_key: Some(PROVIDER_KEY.to_owned()),
            latency: Duration::from_millis(2500),
            ..tollgate_mock::MockOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let mut conn = connect(&h).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let request = post(
        "/v1/chat/completions",
        &format!("authorization: Bearer {ALICE}\r\n"),
        body.to_string().as_bytes(),
    );
    conn.get_mut().write_all(&request).await.unwrap();
    assert_eq!(read_answer(&mut conn).await.unwrap().status, 200);
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused_while_earlier_ones_work() {
    let h = start(Setup {
        server_extra: "max_connections = 2",
        ..Setup::default()
    })
    .await;
    let mut first = connect(&h).await;
    let mut second = connect(&h).await;
    for conn in [&mut first, &mut second] {
        conn.get_mut().write_all(&get("/healthz")).await.unwrap();
        assert_eq!(read_answer(conn).await.unwrap().status, 200);
    }
    let mut third = connect(&h).await;
    let _ = third.get_mut().write_all(&get("/healthz")).await;
    assert!(read_answer(&mut third).await.is_none());
    first.get_mut().write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_answer(&mut first).await.unwrap().status, 200);
    // A slot freed is a slot for the next connection.
    drop(second);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fourth = connect(&h).await;
    fourth.get_mut().write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_answer(&mut fourth).await.unwrap().status, 200);
}

/// Five hundred clients trickling their heads one byte a second are all
/// disconnected at the header-read timeout, and a well-behaved client is
/// served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_trickling_clients_are_all_disconnected() {
    const CLIENTS: usize = 500;
    let h = start(Setup {
        server_extra: "header_read_timeout_secs = 2\nidle_timeout_secs = 60",
        ..Setup::default()
    })
    .await;
    let head = get("/healthz");
    let started = std::time::Instant::now();
    let mut trickling = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let head = head.clone();
        let mut conn = TcpStream::connect(h.addr).await.unwrap();
        trickling.push(tokio::spawn(async move {
            let mut sink = [0u8; 64];
            for byte in &head {
                if conn.write_all(&[*byte]).await.is_err() {
                    return true;
                }
                // A second between bytes, watching for the close meanwhile.
                match tokio::time::timeout(Duration::from_secs(1), conn.read(&mut sink)).await {
                    Ok(Ok(0) | Err(_)) => return true,
                    Ok(Ok(_)) => return false,
                    Err(_) => {}
                }
            }
            false
        }));
    }

    // A normal client is not starved by them.
    let mut conn = connect(&h).await;
    conn.get_mut().write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_answer(&mut conn).await.unwrap().status, 200);

    let mut disconnected = 0;
    for client in trickling {
        if client.await.unwrap() {
            disconnected += 1;
        }
    }
    assert_eq!(disconnected, CLIENTS, "some trickling clients were served");
    // The whole head would have taken 25 s to arrive.
    let after = started.elapsed();
    assert!(after < Duration::from_secs(12), "{after:?}");
}
