//! Each admin command as the request the admin API expects (method, path,
//! query, JSON body), built without I/O so tests can read it; and that
//! request as HTTP, with the admin key, under the base URL.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Uri};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};

use super::{
    Adjustment, CustomerList, KeyList, KeyUpdate, NewKey, NewOrg, OrgUpdate, Page, SpendQuery,
};
use crate::config::Secret;
use crate::upstream::Payload;

/// Where every admin route lives.
const PREFIX: &str = "/admin/v1";

/// One call to the admin API.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiRequest {
    pub method: Method,
    /// Under the base URL, e.g. `/admin/v1/keys/alice`; ids percent-encoded.
    pub path: String,
    /// Unencoded; encoded by [`ApiRequest::path_and_query`].
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Value>,
}

impl ApiRequest {
    fn new(method: Method, path: String) -> Self {
        ApiRequest {
            method,
            path,
            query: Vec::new(),
            body: None,
        }
    }

    fn query(mut self, name: &'static str, value: Option<impl ToString>) -> Self {
        if let Some(value) = value {
            self.query.push((name, value.to_string()));
        }
        self
    }

    fn json(mut self, body: Map<String, Value>) -> Self {
        self.body = Some(Value::Object(body));
        self
    }

    /// The same list request for the page after `id`.
    pub fn after(&self, id: &str) -> ApiRequest {
        let mut next = self.clone();
        next.query.retain(|(name, _)| *name != "after");
        next.query.push(("after", id.to_owned()));
        next
    }

    /// `GET /admin/v1/keys?org=acme`: the path with its query, encoded.
    pub fn path_and_query(&self) -> String {
        let mut text = self.path.clone();
        for (at, (name, value)) in self.query.iter().enumerate() {
            text.push(if at == 0 { '?' } else { '&' });
            text.push_str(name);
            text.push('=');
            text.push_str(&encode(value));
        }
        text
    }

    /// The HTTP request to the API at `base` (which may carry a path
    /// prefix, e.g. behind a reverse proxy), carrying the admin key.
    pub fn to_http(&self, base: &Uri, admin_key: &Secret) -> Result<Request<Payload>, http::Error> {
        let prefix = base.path().trim_end_matches('/');
        let mut parts = base.clone().into_parts();
        parts.path_and_query = Some(format!("{prefix}{}", self.path_and_query()).parse()?);
        let body = match &self.body {
            Some(json) => Bytes::from(json.to_string()),
            None => Bytes::new(),
        };
        let mut authorization = HeaderValue::try_from(format!("Bearer {}", admin_key.expose()))?;
        authorization.set_sensitive(true);
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(Uri::from_parts(parts)?)
            .header(header::AUTHORIZATION, authorization)
            .header(
                header::USER_AGENT,
                concat!("tollgate-admin/", env!("CARGO_PKG_VERSION")),
            );
        if self.body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        request.body(Payload::from(body))
    }
}

// === one builder per command ===

fn collection(name: &str) -> String {
    format!("{PREFIX}/{name}")
}

fn item(collection: &str, id: &str) -> String {
    format!("{PREFIX}/{collection}/{}", encode(id))
}

/// `POST /admin/v1/keys`, with only the fields given.
pub(crate) fn create_key(new: &NewKey) -> ApiRequest {
    let mut body = Map::new();
    put(&mut body, "id", new.id.clone());
    put(&mut body, "org", new.org.clone());
    body.insert("cap_usd".to_owned(), new.cap_usd.clone().into());
    body.insert("period".to_owned(), new.period.clone().into());
    put(&mut body, "models", new.models.as_deref().map(models));
    put(&mut body, "expires_at", new.expires_at.clone());
    put(&mut body, "metadata", new.metadata.clone());
    put_limits(&mut body, new.rpm, new.tpm, &new.model_caps);
    put(&mut body, "customer_cap_usd", new.customer_cap_usd.clone());
    put(&mut body, "customer_period", new.customer_period.clone());
    put(&mut body, "customer_rpm", new.customer_rpm);
    put(&mut body, "customer_tpm", new.customer_tpm);
    put(&mut body, "customer_from", new.customer_from.clone());
    put(&mut body, "customer_required", new.customer_required);
    ApiRequest::new(Method::POST, collection("keys")).json(body)
}

/// `GET /admin/v1/customers?key=ID[&limit=N][&after=ID]`
pub(crate) fn list_customers(list: &CustomerList) -> ApiRequest {
    ApiRequest::new(Method::GET, collection("customers"))
        .query("key", Some(&list.key))
        .query("limit", list.limit)
        .query("after", list.after.as_ref())
}

pub(crate) fn list_keys(list: &KeyList) -> ApiRequest {
    page(
        ApiRequest::new(Method::GET, collection("keys")).query("org", list.org.as_ref()),
        &list.page,
    )
}

pub(crate) fn list_orgs(page_args: &Page) -> ApiRequest {
    page(ApiRequest::new(Method::GET, collection("orgs")), page_args)
}

fn page(request: ApiRequest, page: &Page) -> ApiRequest {
    request
        .query("prefix", page.prefix.as_ref())
        .query("limit", page.limit)
        .query("after", page.after.as_ref())
}

/// `GET` one key or org.
pub(crate) fn show(collection: &str, id: &str) -> ApiRequest {
    ApiRequest::new(Method::GET, item(collection, id))
}

/// `PATCH /admin/v1/keys/{id}` with the changed fields; `--no-expiry`
/// sends `"expires_at": null`.
pub(crate) fn update_key(update: &KeyUpdate) -> ApiRequest {
    let change = &update.change;
    let mut body = Map::new();
    put(&mut body, "cap_usd", change.cap_usd.clone());
    put(&mut body, "period", change.period.clone());
    put(&mut body, "models", change.models.as_deref().map(models));
    if change.no_expiry {
        body.insert("expires_at".to_owned(), Value::Null);
    } else {
        put(&mut body, "expires_at", change.expires_at.clone());
    }
    put(&mut body, "metadata", change.metadata.clone());
    put_limit_changes(
        &mut body,
        Changes {
            rpm: change.rpm,
            no_rpm: change.no_rpm,
            tpm: change.tpm,
            no_tpm: change.no_tpm,
            model_caps: &change.model_caps,
            no_model_caps: change.no_model_caps,
        },
    );
    // The customer template: a `--no-customer-…` flag sends `null`.
    let texts = [
        (
            "customer_cap_usd",
            &change.customer_cap_usd,
            change.no_customer_cap_usd,
        ),
        (
            "customer_period",
            &change.customer_period,
            change.no_customer_period,
        ),
    ];
    for (name, value, clear) in texts {
        if clear {
            body.insert(name.to_owned(), Value::Null);
        } else {
            put(&mut body, name, value.clone());
        }
    }
    let rates = [
        ("customer_rpm", change.customer_rpm, change.no_customer_rpm),
        ("customer_tpm", change.customer_tpm, change.no_customer_tpm),
    ];
    for (name, value, clear) in rates {
        if clear {
            body.insert(name.to_owned(), Value::Null);
        } else {
            put(&mut body, name, value);
        }
    }
    put(&mut body, "customer_from", change.customer_from.clone());
    put(&mut body, "customer_required", change.customer_required);
    ApiRequest::new(Method::PATCH, item("keys", &update.id)).json(body)
}

/// `keys disable` and `keys enable`.
pub(crate) fn set_disabled(id: &str, disabled: bool) -> ApiRequest {
    let mut body = Map::new();
    body.insert("disabled".to_owned(), disabled.into());
    ApiRequest::new(Method::PATCH, item("keys", id)).json(body)
}

pub(crate) fn rotate_key(id: &str) -> ApiRequest {
    ApiRequest::new(Method::POST, format!("{}/rotate", item("keys", id)))
}

pub(crate) fn delete(collection: &str, id: &str) -> ApiRequest {
    ApiRequest::new(Method::DELETE, item(collection, id))
}

pub(crate) fn create_org(new: &NewOrg) -> ApiRequest {
    let mut body = Map::new();
    body.insert("id".to_owned(), new.id.clone().into());
    body.insert("cap_usd".to_owned(), new.cap_usd.clone().into());
    body.insert("period".to_owned(), new.period.clone().into());
    put_limits(&mut body, new.rpm, new.tpm, &new.model_caps);
    ApiRequest::new(Method::POST, collection("orgs")).json(body)
}

pub(crate) fn update_org(update: &OrgUpdate) -> ApiRequest {
    let mut body = Map::new();
    put(&mut body, "cap_usd", update.change.cap_usd.clone());
    put(&mut body, "period", update.change.period.clone());
    let change = &update.change;
    put_limit_changes(
        &mut body,
        Changes {
            rpm: change.rpm,
            no_rpm: change.no_rpm,
            tpm: change.tpm,
            no_tpm: change.no_tpm,
            model_caps: &change.model_caps,
            no_model_caps: change.no_model_caps,
        },
    );
    ApiRequest::new(Method::PATCH, item("orgs", &update.id)).json(body)
}

pub(crate) fn spend(query: &SpendQuery) -> ApiRequest {
    ApiRequest::new(Method::GET, collection("spend"))
        .query("group_by", Some(&query.group_by))
        .query("key", query.key.as_ref())
        .query("org", query.org.as_ref())
        .query("from", query.from.as_ref())
        .query("to", query.to.as_ref())
        .query("format", query.csv.then_some("csv"))
}

pub(crate) fn adjust(adjustment: &Adjustment) -> ApiRequest {
    let mut body = Map::new();
    body.insert("key".to_owned(), adjustment.key.clone().into());
    body.insert(
        "amount_usd".to_owned(),
        adjustment.amount_usd.clone().into(),
    );
    body.insert("note".to_owned(), adjustment.note.clone().into());
    ApiRequest::new(Method::POST, collection("adjustments")).json(body)
}

pub(crate) fn reservations() -> ApiRequest {
    ApiRequest::new(Method::GET, collection("reservations"))
}

/// Sets `field` when a value was given.
fn put(body: &mut Map<String, Value>, field: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        body.insert(field.to_owned(), value.into());
    }
}

/// A new key's or org's rate limits and model groups, when given.
fn put_limits(
    body: &mut Map<String, Value>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    model_caps: &[Map<String, Value>],
) {
    put(body, "rpm", rpm);
    put(body, "tpm", tpm);
    if !model_caps.is_empty() {
        body.insert("model_caps".to_owned(), groups(model_caps));
    }
}

/// What `set` changes of a key's or org's rate limits and model groups.
struct Changes<'a> {
    rpm: Option<u64>,
    no_rpm: bool,
    tpm: Option<u64>,
    no_tpm: bool,
    model_caps: &'a [Map<String, Value>],
    no_model_caps: bool,
}

/// The limits `set` changes: a `--no-…` flag sends `null` (for the groups,
/// `[]`); groups given replace the whole list.
fn put_limit_changes(body: &mut Map<String, Value>, changes: Changes<'_>) {
    for (name, value, clear) in [
        ("rpm", changes.rpm, changes.no_rpm),
        ("tpm", changes.tpm, changes.no_tpm),
    ] {
        if clear {
            body.insert(name.to_owned(), Value::Null);
        } else {
            put(body, name, value);
        }
    }
    if changes.no_model_caps {
        body.insert("model_caps".to_owned(), Value::Array(Vec::new()));
    } else if !changes.model_caps.is_empty() {
        body.insert("model_caps".to_owned(), groups(changes.model_caps));
    }
}

fn groups(model_caps: &[Map<String, Value>]) -> Value {
    model_caps.iter().cloned().map(Value::Object).collect()
}

/// `--models 'gpt-4o*, claude-*'` as a list, spaces and empty items dropped.
fn models(globs: &[String]) -> Value {
    globs
        .iter()
        .map(|glob| glob.trim())
        .filter(|glob| !glob.is_empty())
        .map(|glob| Value::from(glob.to_owned()))
        .collect()
}

/// RFC 3986's unreserved characters, the only ones a path segment or a
/// query value is sent with as they are.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes all but the unreserved characters (a space as `%20`),
/// for a path segment or a query value.
fn encode(text: &str) -> String {
    utf8_percent_encode(text, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::super::{KeyChange, OrgChange};
    use super::*;
    use serde_json::json;

    fn new_key() -> NewKey {
        NewKey {
            id: None,
            org: None,
            cap_usd: "25.00".to_owned(),
            period: "day".to_owned(),
            models: None,
            expires_at: None,
            metadata: None,
            rpm: None,
            tpm: None,
            model_caps: Vec::new(),
            customer_cap_usd: None,
            customer_period: None,
            customer_rpm: None,
            customer_tpm: None,
            customer_from: None,
            customer_required: None,
        }
    }

    fn no_change() -> KeyChange {
        KeyChange {
            cap_usd: None,
            period: None,
            models: None,
            expires_at: None,
            no_expiry: false,
            metadata: None,
            rpm: None,
            no_rpm: false,
            tpm: None,
            no_tpm: false,
            model_caps: Vec::new(),
            no_model_caps: false,
            customer_cap_usd: None,
            no_customer_cap_usd: false,
            customer_period: None,
            no_customer_period: false,
            customer_rpm: None,
            no_customer_rpm: false,
            customer_tpm: None,
            no_customer_tpm: false,
            customer_from: None,
            customer_required: None,
        }
    }

    fn group(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_new_key_sends_money_as_a_string_and_only_the_fields_given() {
        let request = create_key(&new_key());
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.path_and_query(), "/admin/v1/keys");
        assert_eq!(
            request.body,
            Some(json!({"cap_usd": "25.00", "period": "day"}))
        );

        let mut metadata = Map::new();
        metadata.insert("team".to_owned(), "search".into());
        let full = NewKey {
            id: Some("alice".to_owned()),
            org: Some("acme".to_owned()),
            models: Some(vec![
                "gpt-4o*".to_owned(),
                " claude-*".to_owned(),
                String::new(),
            ]),
            expires_at: Some("2026-12-31T23:59:59Z".to_owned()),
            metadata: Some(metadata),
            ..new_key()
        };
        assert_eq!(
            create_key(&full).body,
            Some(json!({
                "id": "alice", "org": "acme", "cap_usd": "25.00", "period": "day",
                "models": ["gpt-4o*", "claude-*"],
                "expires_at": "2026-12-31T23:59:59Z",
                "metadata": {"team": "search"},
            }))
        );
    }

    #[test]
    fn a_key_update_patches_what_changed_and_no_expiry_is_null() {
        let update = KeyUpdate {
            id: "alice".to_owned(),
            change: KeyChange {
                cap_usd: Some("30".to_owned()),
                no_expiry: true,
                ..no_change()
            },
        };
        let request = update_key(&update);
        assert_eq!(request.method, Method::PATCH);
        assert_eq!(request.path, "/admin/v1/keys/alice");
        assert_eq!(
            request.body,
            Some(json!({"cap_usd": "30", "expires_at": null}))
        );
        assert_eq!(
            set_disabled("alice", true).body,
            Some(json!({"disabled": true}))
        );
        let org = update_org(&OrgUpdate {
            id: "acme".to_owned(),
            change: OrgChange {
                cap_usd: None,
                period: Some("month".to_owned()),
                rpm: None,
                no_rpm: false,
                tpm: None,
                no_tpm: false,
                model_caps: Vec::new(),
                no_model_caps: false,
            },
        });
        assert_eq!(org.path, "/admin/v1/orgs/acme");
        assert_eq!(org.body, Some(json!({"period": "month"})));
    }

    #[test]
    fn limits_are_sent_as_given_and_cleared_with_null() {
        let opus = group(json!({"name": "opus", "models": ["claude-opus-*"],
                                "cap_usd": "50.00", "period": "day"}));
        let new = NewKey {
            rpm: Some(60),
            model_caps: vec![opus.clone()],
            ..new_key()
        };
        assert_eq!(
            create_key(&new).body,
            Some(json!({"cap_usd": "25.00", "period": "day", "rpm": 60,
                        "model_caps": [{"name": "opus", "models": ["claude-opus-*"],
                                        "cap_usd": "50.00", "period": "day"}]}))
        );
        let update = KeyUpdate {
            id: "alice".to_owned(),
            change: KeyChange {
                tpm: Some(1000),
                no_rpm: true,
                no_model_caps: true,
                ..no_change()
            },
        };
        assert_eq!(
            update_key(&update).body,
            Some(json!({"rpm": null, "tpm": 1000, "model_caps": []}))
        );
        let org = create_org(&NewOrg {
            id: "acme".to_owned(),
            cap_usd: "500".to_owned(),
            period: "month".to_owned(),
            rpm: None,
            tpm: Some(5),
            model_caps: vec![opus],
        });
        assert_eq!(org.body.unwrap()["model_caps"][0]["name"], "opus");
    }

    #[test]
    fn a_customer_template_is_sent_as_given_and_cleared_with_null() {
        let new = NewKey {
            customer_cap_usd: Some("0.50".to_owned()),
            customer_period: Some("day".to_owned()),
            customer_rpm: Some(10),
            customer_from: Some("body".to_owned()),
            customer_required: Some(true),
            ..new_key()
        };
        assert_eq!(
            create_key(&new).body,
            Some(
                json!({"cap_usd": "25.00", "period": "day", "customer_cap_usd": "0.50",
                        "customer_period": "day", "customer_rpm": 10,
                        "customer_from": "body", "customer_required": true})
            )
        );
        let update = KeyUpdate {
            id: "alice".to_owned(),
            change: KeyChange {
                no_customer_cap_usd: true,
                no_customer_rpm: true,
                customer_tpm: Some(5000),
                customer_required: Some(false),
                ..no_change()
            },
        };
        assert_eq!(
            update_key(&update).body,
            Some(json!({"customer_cap_usd": null, "customer_rpm": null,
                        "customer_tpm": 5000, "customer_required": false}))
        );
        let list = CustomerList {
            key: "alice".to_owned(),
            limit: Some(2),
            after: Some("c1@example.com".to_owned()),
            all: false,
        };
        let request = list_customers(&list);
        assert_eq!(
            request.path_and_query(),
            "/admin/v1/customers?key=alice&limit=2&after=c1%40example.com"
        );
        assert_eq!(
            request.after("c3").path_and_query(),
            "/admin/v1/customers?key=alice&limit=2&after=c3"
        );
    }

    #[test]
    fn ids_and_query_values_are_percent_encoded() {
        assert_eq!(rotate_key("a/b c").path, "/admin/v1/keys/a%2Fb%20c/rotate");
        let request = spend(&SpendQuery {
            group_by: "day".to_owned(),
            key: Some("alice".to_owned()),
            org: None,
            from: Some("2026-11-01T00:00:00+01:00".to_owned()),
            to: None,
            csv: true,
        });
        assert_eq!(
            request.path_and_query(),
            "/admin/v1/spend?group_by=day&key=alice&from=2026-11-01T00%3A00%3A00%2B01%3A00&format=csv"
        );
    }

    #[test]
    fn the_next_page_replaces_after_and_keeps_the_search() {
        let list = KeyList {
            org: Some("acme".to_owned()),
            page: Page {
                prefix: Some("team-a.".to_owned()),
                limit: Some(2),
                after: Some("a".to_owned()),
                all: false,
            },
        };
        let first = list_keys(&list);
        assert_eq!(
            first.path_and_query(),
            "/admin/v1/keys?org=acme&prefix=team-a.&limit=2&after=a"
        );
        assert_eq!(
            first.after("c").path_and_query(),
            "/admin/v1/keys?org=acme&prefix=team-a.&limit=2&after=c"
        );
    }

    #[test]
    fn the_http_request_carries_the_admin_key_under_the_base_path() {
        let key = Secret::new("admin-secret".to_owned());
        let base: Uri = "https://gw.example:8443/tollgate/".parse().unwrap();
        let adjustment = Adjustment {
            key: "alice".to_owned(),
            amount_usd: "-0.25".to_owned(),
            note: "refund".to_owned(),
        };
        let http = adjust(&adjustment).to_http(&base, &key).unwrap();
        assert_eq!(
            http.uri().to_string(),
            "https://gw.example:8443/tollgate/admin/v1/adjustments"
        );
        assert_eq!(http.method(), Method::POST);
        assert_eq!(http.headers()[header::AUTHORIZATION], "Bearer admin-secret");
        assert!(http.headers()[header::AUTHORIZATION].is_sensitive());
        assert_eq!(http.headers()[header::CONTENT_TYPE], "application/json");

        let http = reservations()
            .to_http(&"http://127.0.0.1:8080".parse().unwrap(), &key)
            .unwrap();
        assert_eq!(
            http.uri().to_string(),
            "http://127.0.0.1:8080/admin/v1/reservations"
        );
        assert!(!http.headers().contains_key(header::CONTENT_TYPE));
    }
}
