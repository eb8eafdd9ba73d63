//! The access log: one line per call, target `tollgate::access`, written
//! once the call is over — its response sent to the end or its client
//! gone — and settled, whichever comes last, so that a stream's line
//! carries what it was charged.
//!
//! A call's [`AccessRecord`] is shared by the parts that learn something
//! about it: the server (request id, method, path, status, whether the
//! response went out whole), the proxy (the key and the model, once they
//! are known) and the settlement (the cost). Each holds a clone, and the
//! line is written when the last one lets go: a settlement that goes on
//! in the background after its client left keeps the line waiting for
//! its cost.
//!
//! The line never holds a request header's value beyond the two ids: no
//! key, no cookie, no body.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use http::header::{HeaderName, HeaderValue};
use http::{Method, Request};
use http_body::{Body, Frame, SizeHint};

/// The gateway's id of a call, minted for every request (a UUIDv7) and
/// returned on every response: the `exec_id` of its reservation and
/// ledger entry. A client's value is never taken, since it names the
/// call's books.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-tollgate-request-id");

/// A client's own request id: logged beside the gateway's.
pub const CLIENT_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What is known of one call; cheap to clone.
#[derive(Clone)]
pub struct AccessRecord(Arc<Shared>);

struct Shared {
    started: Instant,
    request_id: Option<HeaderValue>,
    client_request_id: Option<HeaderValue>,
    method: Method,
    path: String,
    completed: AtomicBool,
    /// Written at most a few times per call, by one part at a time: an
    /// uncontended lock.
    learned: Mutex<Learned>,
}

#[derive(Default)]
struct Learned {
    status: Option<u16>,
    key: Option<String>,
    model: Option<String>,
    cost_usd_micros: Option<u64>,
}

impl AccessRecord {
    /// The record of `request`, whose ids are already set.
    pub fn start<B>(request: &Request<B>) -> AccessRecord {
        let headers = request.headers();
        AccessRecord(Arc::new(Shared {
            started: Instant::now(),
            request_id: headers.get(REQUEST_ID).cloned(),
            client_request_id: headers.get(CLIENT_REQUEST_ID).cloned(),
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            completed: AtomicBool::new(false),
            learned: Mutex::new(Learned::default()),
        }))
    }

    fn learn(&self, learn: impl FnOnce(&mut Learned)) {
        learn(
            &mut self
                .0
                .learned
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }

    /// The status the client is answered with.
    pub fn responded(&self, status: http::StatusCode) {
        self.learn(|learned| learned.status = Some(status.as_u16()));
    }

    /// The gateway key the call was made with and the model it asked for.
    pub fn call(&self, key: &str, model: &str) {
        self.learn(|learned| {
            learned.key = Some(key.to_owned());
            learned.model = Some(model.to_owned());
        });
    }

    /// What the call was charged, once settled.
    pub fn charged(&self, usd_micros: u64) {
        self.learn(|learned| learned.cost_usd_micros = Some(usd_micros));
    }

    /// Wraps a response body so that the line says whether it was sent to
    /// its end.
    pub fn watch<B>(self, body: B) -> Logged<B> {
        Logged {
            inner: body,
            record: self,
        }
    }

    fn complete(&self) {
        self.0.completed.store(true, Ordering::Relaxed);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let learned = self
            .learned
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let header = |value: &Option<HeaderValue>| {
            value
                .as_ref()
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        };
        let request_id = header(&self.request_id);
        let client_request_id = header(&self.client_request_id);
        // Whole microseconds, shown as milliseconds.
        let duration_ms = self.started.elapsed().as_micros() as f64 / 1000.0;
        tracing::info!(
            target: "tollgate::access",
            request_id = request_id.as_deref(),
            client_request_id = client_request_id.as_deref(),
            method = %self.method,
            path = %self.path,
            status = learned.status,
            key = learned.key.as_deref(),
            model = learned.model.as_deref(),
            cost_usd_micros = learned.cost_usd_micros,
            duration_ms,
            completed = self.completed.load(Ordering::Relaxed),
            "call"
        );
    }
}

/// A response body that tells its [`AccessRecord`] when it has been sent
/// whole, and keeps the record until it is dropped.
pub struct Logged<B> {
    inner: B,
    record: AccessRecord,
}

impl<B: Body + Unpin> Body for Logged<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // hyper stops polling once `is_end_stream` says so: check both.
        match &polled {
            Poll::Ready(None) => self.record.complete(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.record.complete(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended {
            self.record.complete();
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
