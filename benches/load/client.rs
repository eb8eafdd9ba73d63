//! The load generator's HTTP client: hyper's HTTP/1.1 connections used
//! directly, one request at a time each, kept alive — no pool lock, no
//! per-request allocation beyond the request itself, so the client is the
//! cheapest process in the measurement.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::BenchError;

/// Where requests go and how they are addressed.
#[derive(Clone, Debug)]
pub struct Target {
    /// Short label for the tables: D, P, G0, G.
    pub label: &'static str,
    pub addr: SocketAddr,
    host: HeaderValue,
    /// The gateway keys, taken in turn by successive requests (one, the
    /// config's, unless `--api-keys` made more); the mock and the
    /// pass-through pass it along unread, so every configuration sends the
    /// same bytes.
    auths: Arc<[HeaderValue]>,
    /// The request count shared by every clone, which picks the key.
    turn: Arc<AtomicUsize>,
    /// `x-tollgate-customer` values the chat calls name in turn (GC's);
    /// empty: the calls name none.
    customers: Arc<[HeaderValue]>,
    customer_turn: Arc<AtomicUsize>,
}

impl Target {
    pub fn new(label: &'static str, addr: SocketAddr, key: &str) -> Result<Target, BenchError> {
        Ok(Target {
            label,
            addr,
            host: HeaderValue::from_str(&addr.to_string())
                .map_err(|e| BenchError::Invalid(e.to_string()))?,
            auths: Arc::new([bearer(key)?]),
            turn: Arc::new(AtomicUsize::new(0)),
            customers: Arc::new([]),
            customer_turn: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// This target's POSTs each naming one of `count` customers in turn,
    /// `bench-0` to `bench-{count - 1}` ([`customer_id`]).
    pub fn with_customers(&self, count: usize) -> Result<Target, BenchError> {
        Ok(Target {
            customers: (0..count)
                .map(|n| customer_header(&customer_id(n)))
                .collect::<Result<_, _>>()?,
            customer_turn: Arc::new(AtomicUsize::new(0)),
            ..self.clone()
        })
    }

    /// How many customers its calls name in turn; 0: none.
    pub fn customers(&self) -> usize {
        self.customers.len()
    }

    /// This target sending its requests with `keys` in turn instead.
    pub fn with_keys(&self, keys: &[String]) -> Result<Target, BenchError> {
        if keys.is_empty() {
            return Err(BenchError::Invalid(format!("{}: no keys", self.label)));
        }
        Ok(Target {
            auths: keys
                .iter()
                .map(|key| bearer(key))
                .collect::<Result<_, _>>()?,
            turn: Arc::new(AtomicUsize::new(0)),
            ..self.clone()
        })
    }

    /// The key of the next request. Round-robin, so with `--api-keys`
    /// consecutive calls never share a key and every key is used.
    fn auth(&self) -> HeaderValue {
        match &*self.auths {
            [only] => only.clone(),
            auths => auths[self.turn.fetch_add(1, Ordering::Relaxed) % auths.len()].clone(),
        }
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, BenchError> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = path.parse().map_err(http::Error::from)?;
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        headers.insert(AUTHORIZATION, self.auth());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(request)
    }

    /// A POST, naming the next customer when the target has customers.
    pub fn post(&self, path: &str, body: Bytes) -> Result<Request<Full<Bytes>>, BenchError> {
        let mut request = self.request(Method::POST, path, body)?;
        if !self.customers.is_empty() {
            let turn = self.customer_turn.fetch_add(1, Ordering::Relaxed);
            request.headers_mut().insert(
                CUSTOMER,
                self.customers[turn % self.customers.len()].clone(),
            );
        }
        Ok(request)
    }

    pub fn get(&self, path: &str) -> Result<Request<Full<Bytes>>, BenchError> {
        self.request(Method::GET, path, Bytes::new())
    }

    /// A GET naming the customer `id`, for its budget.
    pub fn get_as_customer(
        &self,
        path: &str,
        id: &str,
    ) -> Result<Request<Full<Bytes>>, BenchError> {
        let mut request = self.get(path)?;
        request.headers_mut().insert(CUSTOMER, customer_header(id)?);
        Ok(request)
    }
}

/// The header naming a call's customer.
const CUSTOMER: &str = "x-tollgate-customer";

/// The id of the `n`th customer a target's calls name.
pub fn customer_id(n: usize) -> String {
    format!("bench-{n}")
}

fn customer_header(id: &str) -> Result<HeaderValue, BenchError> {
    HeaderValue::from_str(id).map_err(|e| BenchError::Invalid(e.to_string()))
}

fn bearer(key: &str) -> Result<HeaderValue, BenchError> {
    HeaderValue::from_str(&format!("Bearer {key}")).map_err(|e| BenchError::Invalid(e.to_string()))
}

/// One keep-alive connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
}

/// A whole response.
pub struct Reply {
    pub status: u16,
    /// `x-tollgate-cost-usd-micros`: what the gateway charged (gateways only).
    pub cost: Option<u64>,
    pub body: Bytes,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Result<Conn, BenchError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            // Ends when the peer closes or the sender is dropped; either way
            // the next request on this connection reports it.
            let _ = connection.await;
        });
        Ok(Conn { sender })
    }

    /// Whether the connection can take another request.
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    /// Sends a request and reads its whole response.
    pub async fn call(&mut self, request: Request<Full<Bytes>>) -> Result<Reply, BenchError> {
        let response = self.send(request).await?;
        let status = response.status().as_u16();
        let cost = response
            .headers()
            .get("x-tollgate-cost-usd-micros")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Reply { status, cost, body })
    }

    /// Sends a request; the body is read by the caller as it arrives.
    pub async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, BenchError> {
        self.sender.ready().await?;
        Ok(self.sender.send_request(request).await?)
    }
}

/// One request on a fresh connection: for the few control calls of a run.
pub async fn call_once(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<Reply, BenchError> {
    Conn::open(addr).await?.call(request).await
}
