//! `GET /healthz`, `GET /readyz` and `GET /metrics`: for orchestrators and
//! scrapers, so none of them asks for a key; keep them off the public
//! network.

use http::{HeaderValue, Response, StatusCode};
use serde_json::json;

use crate::body::{full, json_response, Body};
use crate::budget::Upkeep;
use crate::gateway::Gateway;
use crate::metrics::{self, StoreOp};

/// `GET /healthz`: the process is up.
pub fn healthz() -> Response<Body> {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// `GET /readyz`: the budget store answers.
pub async fn readyz(gateway: &Gateway) -> Response<Body> {
    let ping = gateway.metrics.time(StoreOp::Ping, gateway.store.ping());
    let (status, word) = match ping.await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(error) => {
            tracing::warn!(%error, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        }
    };
    json_response(
        status,
        &json!({"status": word, "store": gateway.store.backend_name()}),
    )
}

/// `GET /metrics`, in the Prometheus text format (see [`crate::metrics`]).
pub async fn scrape(gateway: &Gateway) -> Response<Body> {
    match gateway.metrics.scrape(&gateway.store).await {
        Ok(text) => {
            let mut response = Response::new(full(text));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            response
        }
        Err(error) => {
            tracing::error!(%error, "could not encode the metrics");
            let mut response = Response::new(full(""));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}
