//! The admin API (`/admin/v1/…`, docs/admin.md): keys and orgs
//! made, changed and deleted at run time, the audit trail of those
//! changes, adjustments (refunds and charges by hand), the open holds and
//! the customers a key's calls named.
//!
//! Every call carries the admin key as `Authorization: Bearer …`; with no
//! admin key configured the routes answer 404, as if absent. Errors use
//! OpenAI's shape. A change is written to the store in one atomic step
//! with its audit entry, applied at once to this gateway's directory, and
//! seen by every other gateway within a second (see `crate::directory`).
//!
//! `keys`, `orgs`, `customers`, `books`, `spend` and `audit` are the routes, `fields` checks what
//! a body says, `views` writes what a response shows. `console` serves the
//! operator's page (`GET /admin/`), a client of these routes.

mod audit;
mod books;
mod change;
mod console;
mod customers;
mod fields;
mod keys;
mod orgs;
mod spend;
mod views;

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use crate::body::{full, json_response, Body};
use crate::budget::records::{RecordKind, RecordWrite, StoredRecord, WriteOutcome};
use crate::budget::Records;
use crate::budget::StoreError;
use crate::config::hash_key;
use crate::directory::presented_key;
use crate::gateway::Gateway;

/// The largest admin request body: a key with its metadata is far smaller.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// How many times a change is tried again when another admin changed the
/// same document between its read and its write.
const WRITE_ATTEMPTS: usize = 3;

/// The longest `prefix` a list is searched by: the longest id the API
/// makes.
const MAX_PREFIX_CHARS: usize = 64;

/// Whether a path is the admin API's.
pub fn is_admin_path(path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/")
}

/// Answers one admin request.
pub async fn handle(gateway: &Gateway, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let Some(admin_key) = gateway.config.server.admin_key else {
        return AdminError::not_found(&method, &path).response();
    };
    // The console's files hold no data: the page asks for the key itself.
    if let Some(file) = console::serve(&method, &path) {
        return file;
    }
    let presented = presented_key(request.headers()).map(hash_key);
    if !presented.is_some_and(|digest| bool::from(digest.ct_eq(&admin_key))) {
        return AdminError::unauthorized().response();
    }
    let query = query_pairs(request.uri().query());
    let idempotency_key = request
        .headers()
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = match read_body(request.into_body()).await {
        Ok(body) => body,
        Err(error) => return error.response(),
    };
    let segments: Vec<&str> = path
        .strip_prefix("/admin/v1/")
        .map(|rest| rest.split('/').filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    // An id in the path is held to the rule a body's id is: a look-alike
    // (a Cyrillic letter, a zero-width space, a percent-encoded form — the
    // path is not decoded) is named as the mistake it is, not answered as
    // an id that merely does not exist.
    if let ["keys" | "orgs", id, ..] = segments.as_slice() {
        if !fields::valid_id(id) {
            return fields::bad_id("id").response();
        }
    }
    let call = Call {
        gateway,
        query: &query,
        body: &body,
        idempotency_key: idempotency_key.as_deref(),
    };
    let result = match (&method, segments.as_slice()) {
        (&Method::GET, ["keys"]) => keys::list(&call).await,
        (&Method::POST, ["keys"]) => keys::create(&call).await,
        (&Method::GET, ["keys", id]) => keys::show(&call, id).await,
        (&Method::PATCH, ["keys", id]) => keys::update(&call, id).await,
        (&Method::DELETE, ["keys", id]) => keys::delete(&call, id).await,
        (&Method::POST, ["keys", id, "rotate"]) => keys::rotate(&call, id).await,
        (&Method::GET, ["orgs"]) => orgs::list(&call).await,
        (&Method::POST, ["orgs"]) => orgs::create(&call).await,
        (&Method::GET, ["orgs", id]) => orgs::show(&call, id).await,
        (&Method::PATCH, ["orgs", id]) => orgs::update(&call, id).await,
        (&Method::DELETE, ["orgs", id]) => orgs::delete(&call, id).await,
        (&Method::GET, ["audit"]) => audit::list(&call).await,
        (&Method::POST, ["adjustments"]) => books::adjust(&call).await,
        (&Method::GET, ["reservations"]) => books::reservations(&call).await,
        (&Method::GET, ["spend"]) => spend::report(&call).await,
        (&Method::GET, ["customers"]) => customers::list(&call).await,
        _ => Err(AdminError::not_found(&method, &path)),
    };
    result.unwrap_or_else(AdminError::response)
}

/// The answer to an admin call cut after `limit`
/// (`server.admin_timeout_secs`).
pub fn timed_out(limit: std::time::Duration) -> Response<Body> {
    tracing::warn!(limit_secs = limit.as_secs(), "admin call timed out");
    AdminError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        kind: "server_error",
        code: "timeout",
        param: None,
        message: format!(
            "the admin call took longer than {} s (server.admin_timeout_secs) and was stopped; \
             a change it made may still have been applied: read it back before trying again",
            limit.as_secs()
        ),
    }
    .response()
}

/// What a route reads: the gateway, the query and the body.
struct Call<'a> {
    gateway: &'a Gateway,
    query: &'a HashMap<String, String>,
    body: &'a Bytes,
    /// The request's `Idempotency-Key`, which makes a retried adjustment
    /// apply once.
    idempotency_key: Option<&'a str>,
}

impl Call<'_> {
    /// The body as a JSON object.
    fn json(&self) -> Result<serde_json::Map<String, Value>, AdminError> {
        if self.body.is_empty() {
            return Err(AdminError::bad(
                "the request needs a JSON object body",
                None,
            ));
        }
        match serde_json::from_slice::<Value>(self.body) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(AdminError::bad("the body must be a JSON object", None)),
            Err(error) => Err(AdminError::bad(
                format!("the body is not valid JSON: {error}"),
                None,
            )),
        }
    }

    /// Writes a document with its audit entry. `Ok(None)`: someone else
    /// changed it first (the caller reads it again and retries).
    async fn write(
        &self,
        kind: RecordKind,
        id: &str,
        expect: Option<u64>,
        body: &impl serde::Serialize,
        audit: Value,
    ) -> Result<Option<u64>, AdminError> {
        let write = RecordWrite {
            kind,
            id: id.to_owned(),
            expect,
            body: serde_json::to_string(body).map_err(|e| AdminError::internal(e.to_string()))?,
            audit: audit.to_string(),
        };
        // Until the write is applied here: see `Directory::writing`.
        let _writing = self.gateway.directory.writing.lock().await;
        let outcome = self
            .gateway
            .store
            .write_record(&write)
            .await
            .map_err(AdminError::store)?;
        let directory = &self.gateway.directory;
        match outcome {
            WriteOutcome::Written { revision, version } => {
                // Applied here at once; the other gateways poll for it.
                let record = StoredRecord {
                    kind,
                    id: id.to_owned(),
                    revision,
                    body: write.body,
                };
                directory.apply(&record, version, &self.gateway.store);
                tracing::info!(target: "tollgate::audit", %kind, id, change = %write.audit, "admin change");
                Ok(Some(revision))
            }
            WriteOutcome::Conflict { .. } => {
                // Someone else changed it: read what the store holds now.
                if let Err(error) = directory.reload(&self.gateway.store).await {
                    tracing::warn!(%error, "could not read the keys and orgs back; the next poll will");
                }
                Ok(None)
            }
        }
    }

    /// The page size asked for: `limit`, default 100, at most 1000.
    fn limit(&self) -> Result<usize, AdminError> {
        match self.query.get("limit") {
            None => Ok(100),
            Some(text) => match text.parse::<usize>() {
                Ok(0) | Err(_) => Err(AdminError::bad(
                    format!("limit must be a whole number from 1 to 1000, not {text:?}"),
                    Some("limit"),
                )),
                Ok(limit) => Ok(limit.min(1000)),
            },
        }
    }

    /// The start of the ids a list is searched by (`prefix`; empty or
    /// absent: every id). Case-sensitive, as ids are. Only the characters
    /// an id may hold are taken: anything else (a space, a slash, a control
    /// character) could match nothing, so it is a mistake worth naming
    /// rather than an empty answer.
    fn prefix(&self) -> Result<&str, AdminError> {
        let Some(prefix) = self.query.get("prefix") else {
            return Ok("");
        };
        let plain = prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if prefix.len() > MAX_PREFIX_CHARS || !plain {
            return Err(AdminError::bad(
                format!(
                    "prefix must be at most {MAX_PREFIX_CHARS} of A-Z, a-z, 0-9, `.`, `_` and `-` \
                     (the characters of an id), not {:?}",
                    prefix
                        .chars()
                        .take(MAX_PREFIX_CHARS + 1)
                        .collect::<String>()
                ),
                Some("prefix"),
            ));
        }
        Ok(prefix)
    }
}

/// The entries of an id-sorted map whose id starts with `prefix` and comes
/// after `after`, in id order. Read as a range of the map, so a search or a
/// late page costs what it finds, not the size of the map.
fn matching<'m, T>(
    map: &'m BTreeMap<String, T>,
    prefix: &'m str,
    after: Option<&'m String>,
) -> impl Iterator<Item = (String, &'m T)> + 'm {
    let start = match after {
        Some(after) if after.as_str() >= prefix => Bound::Excluded(after.as_str()),
        _ => Bound::Included(prefix),
    };
    map.range::<str, _>((start, Bound::Unbounded))
        .take_while(move |(id, _)| id.starts_with(prefix))
        .map(|(id, entry)| (id.clone(), entry))
}

/// A page of a list sorted by id: the items after `after`, at most `limit`,
/// and the id to ask for the next page from (`None` on the last page).
fn page<T>(
    items: impl Iterator<Item = (String, T)>,
    after: Option<&String>,
    limit: usize,
) -> (Vec<T>, Option<String>) {
    let mut page = Vec::new();
    let mut last = None;
    let mut more = false;
    for (id, item) in items.filter(|(id, _)| after.is_none_or(|after| id > after)) {
        if page.len() == limit {
            more = true;
            break;
        }
        last = Some(id);
        page.push(item);
    }
    (page, if more { last } else { None })
}

async fn read_body(body: Incoming) -> Result<Bytes, AdminError> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(AdminError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            code: "request_too_large",
            param: None,
            message: format!(
                "the body is larger than the admin API's limit of {MAX_BODY_BYTES} bytes"
            ),
        }),
        Err(error) => Err(AdminError::bad(
            format!("could not read the body: {error}"),
            None,
        )),
    }
}

/// The query's name/value pairs, decoded as a form is: `+` is a space, a
/// `%` not followed by two hex digits stays as it is, and a name given
/// twice keeps its last value.
fn query_pairs(query: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn created(value: &Value) -> Response<Body> {
    json_response(StatusCode::CREATED, value)
}

fn ok(value: &Value) -> Response<Body> {
    json_response(StatusCode::OK, value)
}

fn no_content() -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

/// An admin error: its status, OpenAI's `type` and `code`, the field it is
/// about, and a message saying what to do.
#[derive(Debug)]
struct AdminError {
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    param: Option<String>,
    message: String,
}

impl AdminError {
    fn bad(message: impl Into<String>, param: Option<&str>) -> AdminError {
        AdminError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: "invalid_value",
            param: param.map(str::to_owned),
            message: message.into(),
        }
    }

    fn not_found(method: &Method, path: &str) -> AdminError {
        AdminError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: "unknown_url",
            param: None,
            message: format!("no route for {method} {path}"),
        }
    }

    fn no_such(kind: RecordKind, id: &str) -> AdminError {
        AdminError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: "not_found",
            param: None,
            message: format!("no {kind} `{id}`"),
        }
    }

    fn conflict(code: &'static str, message: impl Into<String>) -> AdminError {
        AdminError {
            status: StatusCode::CONFLICT,
            kind: "invalid_request_error",
            code,
            param: None,
            message: message.into(),
        }
    }

    fn config_managed(kind: RecordKind, id: &str) -> AdminError {
        AdminError::conflict(
            "config_managed",
            format!(
                "{kind} `{id}` comes from the config file: change it there and restart the gateway"
            ),
        )
    }

    /// Another admin changed the document between every read and write.
    fn busy(kind: RecordKind, id: &str) -> AdminError {
        AdminError::conflict(
            "concurrent_change",
            format!("{kind} `{id}` kept changing while this change was applied; try again"),
        )
    }

    fn unauthorized() -> AdminError {
        AdminError {
            status: StatusCode::UNAUTHORIZED,
            kind: "invalid_request_error",
            code: "invalid_api_key",
            param: None,
            message: "invalid admin key: send the admin key as `Authorization: Bearer <key>` \
                      (a gateway key does not open the admin API)"
                .to_owned(),
        }
    }

    fn store(error: StoreError) -> AdminError {
        tracing::error!(%error, "admin API: budget store error");
        AdminError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            code: "budget_store_unavailable",
            param: None,
            message: "the budget store is unavailable, so nothing was changed; retry shortly"
                .to_owned(),
        }
    }

    fn internal(detail: String) -> AdminError {
        tracing::error!(detail, "admin API: internal error");
        AdminError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            code: "internal_error",
            param: None,
            message: "the gateway could not do this; see its log".to_owned(),
        }
    }

    fn response(self) -> Response<Body> {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }});
        let mut response = json_response(self.status, &body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_components_are_decoded() {
        let pairs = query_pairs(Some("org=acme%2D1&after=a+b&limit=5&flag"));
        assert_eq!(pairs["org"], "acme-1");
        assert_eq!(pairs["after"], "a b");
        assert_eq!(pairs["limit"], "5");
        assert_eq!(pairs["flag"], "");
        let pairs = query_pairs(Some("off=100%&odd=%zz&plus=%2B&org=a&org=b"));
        assert_eq!(pairs["off"], "100%");
        assert_eq!(pairs["odd"], "%zz");
        assert_eq!(pairs["plus"], "+");
        assert_eq!(pairs["org"], "b");
    }

    #[test]
    fn a_page_stops_at_its_limit_and_names_where_the_next_starts() {
        let items = || (1..=5).map(|i| (format!("k{i}"), i));
        assert_eq!(page(items(), None, 2), (vec![1, 2], Some("k2".to_owned())));
        assert_eq!(
            page(items(), Some(&"k2".to_owned()), 2),
            (vec![3, 4], Some("k4".to_owned()))
        );
        assert_eq!(page(items(), Some(&"k4".to_owned()), 2), (vec![5], None));
        assert_eq!(page(items(), None, 5), (vec![1, 2, 3, 4, 5], None));
    }

    #[test]
    fn a_search_reads_the_ids_with_its_prefix_after_the_page_before() {
        let map: BTreeMap<String, u32> = ["a", "b-1", "b-2", "b-3", "bb", "c"]
            .iter()
            .zip(1..)
            .map(|(id, n)| ((*id).to_owned(), n))
            .collect();
        let found = |prefix: &str, after: Option<&str>| -> Vec<u32> {
            let after = after.map(str::to_owned);
            matching(&map, prefix, after.as_ref())
                .map(|(_, n)| *n)
                .collect()
        };
        assert_eq!(found("", None), [1, 2, 3, 4, 5, 6]);
        assert_eq!(found("b-", None), [2, 3, 4]);
        assert_eq!(found("b-", Some("b-1")), [3, 4]);
        // An `after` before the prefix starts at the prefix; one past it ends.
        assert_eq!(found("b-", Some("a")), [2, 3, 4]);
        assert_eq!(found("b-", Some("b-3")), Vec::<u32>::new());
        assert_eq!(found("b-", Some("bz")), Vec::<u32>::new());
        assert_eq!(found("B", None), Vec::<u32>::new(), "case-sensitive");
        assert_eq!(found("", Some("bb")), [6]);
    }
}
