//! One proxied call, from the client's request to its settlement, in four
//! steps:
//!
//! 1. [`admit`]: authenticate the gateway key, read and check the body
//!    (setting an output limit if the client gave none), find the model's
//!    price and provider and the key's right to it, estimate the call's
//!    upper bound and build the provider's request;
//! 2. [`reserve`]: reserve the bound against every cap — key, org and the
//!    agent run the request names (`x-tollgate-run`) — refused with 409
//!    while a request with the same `Idempotency-Key` under the same
//!    gateway key is still in flight; a call whose output limit the
//!    gateway may lower reserves the most of its range that fits, and is
//!    sent with the limit that amount pays for;
//! 3. [`forward`]: send it with the provider's credential;
//! 4. settle the actual cost — before the body of a plain response, before
//!    the terminal event of a stream (see [`crate::metered`]).
//!
//! [`count_tokens`] is the uncharged sibling: checked, forwarded, never
//! reserved.
//!
//! Every error in step 1 costs nothing and forwards nothing. From step 2
//! on, a [`SettleTicket`](crate::settle::SettleTicket) guarantees exactly
//! one settlement on every path. With the store down and
//! `on_store_error = "allow"`, the call goes the same way unmetered.

mod admit;
pub mod count_tokens;
pub mod customer;
mod forward;
mod reserve;

use std::sync::Arc;

use http::header::HeaderValue;
use http::{Request, Response};
use hyper::body::Incoming;
use uuid::Uuid;

use crate::access::{AccessRecord, REQUEST_ID};
use crate::body::{close_connection, drain, Body};
use crate::error::GatewayError;
use crate::family::Route;
use crate::gateway::Gateway;
use crate::rate_headers::RateHeaders;
use admit::admit;
pub use admit::run_scope;
use forward::forward;
use reserve::reserve;

/// The response header saying that a client-set output limit was lowered
/// to fit what remains of the budget (a key with `on_insufficient =
/// "clamp"`), and to what.
const OUTPUT_LIMIT_CLAMPED: &str = "x-tollgate-output-limit-clamped";

pub async fn handle(
    gateway: &Arc<Gateway>,
    route: Route,
    request: Request<Incoming>,
) -> Response<Body> {
    // The server sets the request id on every request (and the response
    // carries it back); without one, the call still gets an id of its own.
    let exec_id = match request.headers().get(REQUEST_ID) {
        Some(id) => String::from_utf8_lossy(id.as_bytes()).into_owned(),
        None => Uuid::now_v7().to_string(),
    };
    let (parts, mut body) = request.into_parts();
    let access = parts.extensions.get::<AccessRecord>();
    let mut rates = None;
    match proxy(
        gateway, &route, &parts, &mut body, &exec_id, access, &mut rates,
    )
    .await
    {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(%exec_id, status = error.status().as_u16(), %error, "refused");
            let mut response = error.into_response(route.shape(), &exec_id);
            // Failed after its reserve (the provider unreachable or slow,
            // a fit that failed): the key's limits still apply, and say so.
            if let Some(rates) = rates {
                rates.insert(response.headers_mut());
            }
            // Refused before or while reading the body: read the rest, or
            // the next request on the connection would be read from it.
            if !drain(&mut body).await {
                close_connection(&mut response);
            }
            response
        }
    }
}

async fn proxy(
    gateway: &Gateway,
    route: &Route,
    parts: &http::request::Parts,
    body: &mut Incoming,
    exec_id: &str,
    access: Option<&AccessRecord>,
    rates: &mut Option<RateHeaders>,
) -> Result<Response<Body>, GatewayError> {
    let headers = &parts.headers;
    let mut admitted = admit(gateway, route, headers, &parts.uri, body).await?;
    let mut ticket = gateway.settler.ticket(
        exec_id,
        &admitted.key,
        &admitted.call.model,
        admitted.price,
        admitted.estimate,
    );
    if let Some(access) = access {
        access.call(&admitted.key.id, &admitted.call.model);
        ticket.report_to(access.clone());
    }
    let reserved = reserve(gateway, &admitted, exec_id, &mut ticket).await?;
    *rates = reserved.as_ref().and_then(|held| held.rates);
    // Fitted to what remains: sent with the output limit the reserved
    // amount pays for, and settled against the bound that limit gives.
    let fitted = match &reserved {
        Some(held) => admitted.fit_to(held.amount, headers)?,
        None => None,
    };
    if fitted.is_some() {
        ticket.refit(admitted.estimate);
    }
    let said = admitted.fit.is_some_and(|fit| fit.client_limit);
    ticket.sent(admitted.call.stream, admitted.price.reasoning);
    let mut response = forward(gateway, admitted, ticket, exec_id).await?;
    if let Some(rates) = rates {
        rates.insert(response.headers_mut());
    }
    if let Some(limit) = fitted.filter(|_| said) {
        response
            .headers_mut()
            .insert(OUTPUT_LIMIT_CLAMPED, HeaderValue::from(limit));
    }
    Ok(response)
}
