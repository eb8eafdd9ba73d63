//! The HTTP body type every response of the gateway carries, and helpers to
//! build one. A leaf: error answers, proxied streams and the gateway's own
//! endpoints all use it without depending on each other.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body the gateway sends: a whole buffer or a stream.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A body of `bytes`, sent whole.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A response with `value` as its JSON body.
pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The most of an unread request body drained so that its connection can
/// carry the next request; a larger rest is not read, and the connection
/// is closed after the answer instead.
pub const DRAIN_LIMIT: u64 = 64 * 1024;

/// How long draining may wait for a slow client.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and discards what is left of a request body the gateway answered
/// without reading (a 401 before the body, a 413, a 404), so that a
/// keep-alive client's next request on the connection is read as a request
/// and not as the rest of this body. True once the body has ended (at
/// once, for a body already read); false when the rest is over
/// [`DRAIN_LIMIT`], fails, or takes longer than a moment: then answer
/// with [`close_connection`].
pub async fn drain(body: &mut hyper::body::Incoming) -> bool {
    use http_body::Body as _;
    if body.size_hint().lower() > DRAIN_LIMIT {
        return false;
    }
    let reading = async {
        let mut read = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Some(data) = frame.data_ref() {
                read += data.len() as u64;
                if read > DRAIN_LIMIT {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, reading)
        .await
        .unwrap_or(false)
}

/// Asks the client to close the connection after `response` (and the
/// server to close it): the rest of the request body was never read.
pub fn close_connection<B>(response: &mut Response<B>) {
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
}
