//! tollgate: an LLM API gateway that enforces a hard spending cap per key
//! and per org, exactly, under any concurrency.
//!
//! An agent points its unmodified OpenAI (or Azure OpenAI), Anthropic or
//! Google SDK at the gateway.
//! For every call the gateway estimates an upper bound of the cost, reserves
//! it atomically against every cap that applies, streams the call through
//! to the provider, reads the token usage from the response and settles the
//! actual cost before the client sees the end.
//!
//! # Layout
//!
//! From the door inwards; each module imports only those below it
//! (`tests/it/module_loops.rs` keeps it so):
//!
//! - [`server`] accepts connections and routes each request: proxied calls
//!   to [`proxy`], the admin API to [`admin`], the rest to [`endpoints`]
//!   (health, metrics, models, budget); [`server::start`] runs it with
//!   every background task. [`gateway`] is the state they share;
//!   [`directory`] the keys and orgs, from the config and the store.
//! - [`proxy`] is the path of one call in named steps: admit, reserve,
//!   forward, settle. [`settle`] holds the ticket that settles each call
//!   exactly once; [`metered`] is the streaming body that reads usage on
//!   the way; [`upstream`] is the shared pooled client to the providers.
//! - [`family`] is one module per provider family (OpenAI, Anthropic,
//!   Gemini, Vertex AI, Azure OpenAI): its routes, where its clients send
//!   their key, its request rules, its usage and streams, its upstream
//!   authentication.
//! - [`api`] is the checked call every family produces, and the checks
//!   the families share; [`error`] answers in the caller's shape, and
//!   [`rate_headers`] states a key's rate limits to its clients.
//! - [`estimate`] bounds a call's cost before it is sent, counting OpenAI
//!   models' tokens with [`tokenizer`]; [`usage`] is the token usage every
//!   family reads and the stream meter's state; [`sse`] splits an event
//!   stream in one pass.
//! - [`budget`] is the reserve/settle protocol and its stores; [`sweep`]
//!   expires what crashed calls left; [`drain`] moves the Redis ledger to
//!   a durable sink; [`reconcile`] proves the books; [`alerts`] queues and
//!   delivers spending alerts to a webhook.
//! - [`metrics`] counts reserves, settlements and store calls for
//!   `GET /metrics`; [`config`] loads and checks the TOML config.
//! - [`logging`] writes the process's log lines, plain or JSON.
//! - Leaves, importing nothing of ours: [`money`] (integer micro-USD),
//!   [`period`], [`provider`], [`body`], [`hosted`] (the tools providers
//!   bill per use), [`access`] (the access log line of each call);
//!   [`prices`] prices tokens and tool uses exactly.
//!
//! Beside the gateway, importing from it but imported by nothing:
//! [`admin_cli`], the `tollgate admin` client of the admin HTTP API.
//!
//! The fake provider the tests, demos and benchmarks use is its own crate,
//! `tollgate-mock`, outside this library.

pub mod access;
pub mod admin;
pub mod admin_cli;
pub mod alerts;
pub mod api;
pub mod body;
pub mod budget;
pub mod config;
pub mod directory;
pub mod drain;
pub mod endpoints;
pub mod error;
pub mod estimate;
pub mod family;
pub mod gateway;
pub mod hosted;
pub mod logging;
pub mod metered;
pub mod metrics;
pub mod money;
pub mod period;
pub mod prices;
pub mod provider;
pub mod proxy;
pub mod rate_headers;
pub mod reconcile;
pub mod server;
pub mod settle;
pub mod sse;
pub mod sweep;
pub mod tokenizer;
pub mod upstream;
pub mod usage;
