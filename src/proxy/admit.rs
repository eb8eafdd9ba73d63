//! Admitting a call: everything checked before any money moves. An error
//! here costs nothing and forwards nothing.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, CONTENT_LENGTH};
use http::Request;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use crate::api::{
    check_api_matches, check_headers, check_hosted_tools, check_priced_options, Api, Call,
};
use crate::config::{KeyConfig, Provider, Secret};
use crate::error::GatewayError;
use crate::estimate::{estimate, Estimate, TokenCounter};
use crate::gateway::Gateway;
use crate::prices::ModelPrice;
use crate::upstream;

/// Output allowance for a model whose price entry gives no maximum.
const DEFAULT_OUTPUT_LIMIT: u64 = 4_096;

/// Bodies larger than this are estimated on a blocking thread: counting the
/// tokens of a 100k-token prompt takes about 10 ms, which would stall
/// one of the runtime's workers and every call it serves.
const BLOCKING_ESTIMATE_BYTES: usize = 64 * 1024;

/// The header a client names a request with, so that a repeat sent while
/// the first is still in flight is refused instead of paid twice. It is
/// forwarded to the provider unchanged.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The longest `Idempotency-Key` accepted (as long as Stripe's and
/// OpenAI's).
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// A call that may be reserved and sent.
pub struct Admitted<'g> {
    pub key: Arc<KeyConfig>,
    /// The claim of the request's `Idempotency-Key`, if it sent one.
    pub claim: Option<String>,
    pub call: Call,
    pub price: &'g ModelPrice,
    pub provider: &'g Provider,
    pub estimate: Estimate,
    /// The provider's request, built before reserving: a request that
    /// cannot be sent costs nothing.
    pub upstream: Request<Full<Bytes>>,
}

pub async fn admit<'g>(
    gateway: &'g Gateway,
    api: Api,
    headers: &HeaderMap,
    body: &mut Incoming,
) -> Result<Admitted<'g>, GatewayError> {
    let key = gateway.directory.authenticate(headers)?;
    let claim = idempotency_claim(headers, &key.id)?;
    let body = read_body(headers, body, gateway.config.server.max_request_bytes).await?;
    let body_len = body.len();
    let prices = &gateway.config.prices;
    let mut call = Call::parse(api, body)?;
    if !key.allows_model(&call.model) {
        return Err(GatewayError::ModelNotAllowed {
            model: call.model,
            key: key.id.clone(),
        });
    }
    let unknown = || GatewayError::UnknownModel {
        model: call.model.clone(),
    };
    let price = prices.get(&call.model).ok_or_else(unknown)?;
    let provider = gateway
        .config
        .provider_for(&call.model)
        .ok_or_else(unknown)?;
    check_api_matches(api, provider.kind, &call.model)?;
    call.options.long_context = check_headers(api, headers)?;
    check_priced_options(&call, price)?;
    check_hosted_tools(&call, price)?;
    call.bound_output(
        price.max_output_tokens.unwrap_or(DEFAULT_OUTPUT_LIMIT),
        &provider.output_limit_fields,
    );
    let provider_key = provider_key(provider)?;

    let counter = TokenCounter::for_model(provider.kind, &call.model);
    let (call, estimate) = if body_len > BLOCKING_ESTIMATE_BYTES {
        let price = price.clone();
        let counting = tokio::task::spawn_blocking(move || {
            let estimate = estimate(&call, &price, counter);
            (call, estimate)
        });
        counting
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    } else {
        let estimate = estimate(&call, price, counter);
        (call, estimate)
    };
    let upstream = upstream::request(provider, provider_key, api, headers, call.forward_body())
        .map_err(|error| {
            tracing::error!(provider = %provider.name, %error, "could not build the provider request");
            GatewayError::UpstreamUnreachable {
                provider: provider.name.clone(),
            }
        })?;
    Ok(Admitted {
        key,
        claim,
        call,
        price,
        provider,
        estimate,
        upstream,
    })
}

/// The provider's credential, or a 503 naming the variable that holds it
/// when the operator has not set it.
pub(super) fn provider_key(provider: &Provider) -> Result<&Secret, GatewayError> {
    provider
        .api_key
        .as_ref()
        .ok_or_else(|| GatewayError::ProviderKeyMissing {
            provider: provider.name.clone(),
            env: provider.api_key_env.clone(),
        })
}

/// Reads the request body, refusing one over `limit` before reading it when
/// its length is declared.
pub(super) async fn read_body(
    headers: &HeaderMap,
    body: &mut Incoming,
    limit: usize,
) -> Result<Bytes, GatewayError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(GatewayError::BodyTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(GatewayError::BodyTooLarge { limit })
        }
        Err(error) => Err(GatewayError::BadRequest {
            message: format!("could not read the request body: {error}"),
            param: None,
            code: None,
        }),
    }
}

/// The claim the request's `Idempotency-Key` makes, if it sends one: the
/// hex SHA-256 of the gateway key's id, a NUL byte and the header value,
/// so the same header under another gateway key is another claim (key ids
/// never contain NUL). The header must appear once, with 1 to 255 visible
/// ASCII characters.
fn idempotency_claim(headers: &HeaderMap, key_id: &str) -> Result<Option<String>, GatewayError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = |problem: String| GatewayError::BadRequest {
        message: format!("invalid Idempotency-Key header: {problem}"),
        param: None,
        code: None,
    };
    if values.next().is_some() {
        return Err(invalid("send it once".to_owned()));
    }
    let value = value.as_bytes();
    if value.is_empty() || value.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(invalid(format!(
            "it must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes long, not {}",
            value.len()
        )));
    }
    if !value.iter().all(u8::is_ascii_graphic) {
        return Err(invalid(
            "use visible ASCII characters only, without spaces".to_owned(),
        ));
    }
    let mut hasher = Sha256::new();
    hasher.update(key_id.as_bytes());
    hasher.update([0]);
    hasher.update(value);
    Ok(Some(hex::encode(hasher.finalize())))
}
