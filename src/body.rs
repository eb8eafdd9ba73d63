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
