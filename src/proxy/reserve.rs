//! Reserving an admitted call's upper bound against every cap that applies,
//! under the request's idempotency claim when it has one.

use crate::budget::{ClaimedReserve, ReserveOutcome, ReserveRequest};
use crate::config::OnStoreError;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::metrics::StoreOp;
use crate::settle::SettleTicket;

use super::admit::Admitted;

/// Reserves the call's bound, and tells `ticket` what is left to settle.
/// Refused (denied, a duplicate, the store down): nothing is sent.
pub async fn reserve(
    gateway: &Gateway,
    admitted: &Admitted<'_>,
    exec_id: &str,
    ticket: &mut SettleTicket,
) -> Result<(), GatewayError> {
    match reserve_bound(gateway, admitted, exec_id).await {
        Ok(true) => Ok(()),
        // The store is down and the operator chose to let calls through
        // unmetered (each one is logged): nothing to settle.
        Ok(false) => {
            ticket.disarm();
            Ok(())
        }
        Err(error) => {
            // Denied or a duplicate, nothing was reserved. When the store
            // failed, a reserve may have landed with its answer lost: the
            // ticket, dropped armed, settles nothing against it in the
            // background, which frees its headroom at once rather than at
            // its deadline (and finds nothing to release when it never
            // landed).
            if !matches!(error, GatewayError::StoreUnavailable) {
                ticket.disarm();
            }
            Err(error)
        }
    }
}

/// `Ok(false)`: the store is down and the operator opted to let calls
/// through (`on_store_error = "allow"`).
async fn reserve_bound(
    gateway: &Gateway,
    admitted: &Admitted<'_>,
    exec_id: &str,
) -> Result<bool, GatewayError> {
    let (key_scope, org_scope) = gateway.directory.scopes(&admitted.key);
    let amount = admitted.estimate.amount;
    let request = ReserveRequest {
        exec_id: exec_id.to_owned(),
        key: key_scope,
        org: org_scope,
        model: admitted.call.model.clone(),
        amount,
        ttl: gateway.config.store.reservation_ttl,
    };
    let reserving = async {
        match &admitted.claim {
            Some(claim) => gateway.store.reserve_claimed(&request, claim).await,
            None => gateway
                .store
                .reserve(&request)
                .await
                .map(ClaimedReserve::Ran),
        }
    };
    let outcome = match gateway.metrics.time(StoreOp::Reserve, reserving).await {
        // The first request under this claim is still in flight: nothing
        // was charged, and nothing is sent.
        Ok(ClaimedReserve::Duplicate) => return Err(GatewayError::IdempotencyConflict),
        Ok(ClaimedReserve::Ran(outcome)) => Ok(outcome),
        Err(error) => Err(error),
    };
    gateway.metrics.count_reserve(&outcome);
    match outcome {
        Ok(ReserveOutcome::Reserved) => Ok(true),
        Ok(ReserveOutcome::Denied(denial)) => Err(GatewayError::BudgetExceeded(denial)),
        Err(error) => match gateway.config.store.on_store_error {
            OnStoreError::Reject => {
                tracing::error!(%exec_id, %error, "budget store error: call refused");
                Err(GatewayError::StoreUnavailable)
            }
            OnStoreError::Allow => {
                tracing::error!(%exec_id, key = %admitted.key.id, amount_usd_micros = amount, %error,
                    "budget store error: call let through UNMETERED (on_store_error = \"allow\")");
                Ok(false)
            }
        },
    }
}
