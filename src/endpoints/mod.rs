//! The gateway's own endpoints, one family a file: health and metrics for
//! operators, and the models and budget a caller's key may see. Each
//! handler takes the shared [`Gateway`](crate::gateway::Gateway) and the
//! request, and answers in the caller's API shape.

pub mod budget;
pub mod health;
pub mod models;
