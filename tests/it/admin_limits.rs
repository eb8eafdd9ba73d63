//! Model groups (`model_caps`) and rate limits (`rpm`, `tpm`) through the
//! admin API on one gateway: made, shown, replaced and cleared on keys and
//! orgs; every bad value refused with a 400 naming its field and nothing
//! changed; the config file's shown alike and not changeable; and each
//! money group's state in `GET /v1/budget` and in a KEY's and an ORG's
//! `budget`, charged exactly what the key was for the models it matches.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::admin_api::{admin, gateway, make_key, ADMIN};
use crate::common::{chat, start, Harness, Setup, ALICE};

/// A money group as a request writes it.
fn group(name: &str, models: &[&str], cap_usd: &str, period: &str) -> Value {
    json!({"name": name, "models": models, "cap_usd": cap_usd, "period": period})
}

/// The group named `name` in a list of groups.
fn named<'v>(groups: &'v Value, name: &str) -> &'v Value {
    groups
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {groups}"))
        .iter()
        .find(|group| group["name"] == name)
        .unwrap_or_else(|| panic!("no group {name} in {groups}"))
}

fn names(groups: &Value) -> Vec<&str> {
    groups
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {groups}"))
        .iter()
        .map(|group| group["name"].as_str().unwrap())
        .collect()
}

/// One call to `model` with `secret`, answered 200 and settled; what the
/// key was charged for it.
async fn charged(h: &Harness, secret: &str, model: &str) -> u64 {
    let before = h.budget(secret).await["key"]["spent_usd_micros"]
        .as_u64()
        .unwrap();
    let response = h
        .post("/v1/chat/completions", secret, &chat(model, "hi"))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    h.settled().await;
    let after = h.budget(secret).await["key"]["spent_usd_micros"]
        .as_u64()
        .unwrap();
    assert!(after > before, "{model} charged nothing");
    after - before
}

#[tokio::test]
async fn keys_and_orgs_take_model_groups_and_rate_limits_and_show_them() {
    let h = gateway().await;
    let (status, org) = admin(
        &h,
        "POST",
        "/admin/v1/orgs",
        Some(json!({"id": "labs", "cap_usd": "100.00", "period": "month",
                    "model_caps": [group("fours", &["gpt-4o*"], "50.00", "month")],
                    "rpm": 600, "tpm": 1_000_000})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{org}");
    assert_eq!(
        org["model_caps"],
        json!([{"name": "fours", "models": ["gpt-4o*"], "cap_usd": "50.00",
                "cap_usd_micros": 50_000_000, "period": "month", "rpm": null, "tpm": null}])
    );
    assert_eq!((&org["rpm"], &org["tpm"]), (&json!(600), &json!(1_000_000)));
    let fours = named(&org["budget"]["model_caps"], "fours");
    assert_eq!(fours["period"], "month");
    assert_eq!(fours["models"], json!(["gpt-4o*"]));
    assert_eq!(fours["cap_usd_micros"], 50_000_000);
    assert_eq!(fours["spent_usd_micros"], 0);
    assert_eq!(fours["reserved_usd_micros"], 0);
    assert_eq!(fours["remaining_usd_micros"], 50_000_000);
    assert_eq!(fours["period_id"], org["budget"]["period_id"]);
    assert_eq!(fours["resets_at"], org["budget"]["resets_at"]);

    let (status, made) = admin(
        &h,
        "POST",
        "/admin/v1/keys",
        Some(
            json!({"id": "agent", "org": "labs", "cap_usd": "10.00", "period": "day",
                    "model_caps": [
                        {"name": "minis", "models": ["gpt-4o-mini", "gpt-4.1-mini*"],
                         "cap_usd": "2.5", "period": "day", "rpm": 100},
                        {"name": "claude", "models": ["claude-*"], "tpm": 50_000},
                    ],
                    "rpm": 60}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    let key = &made["key"];
    assert_eq!(
        key["model_caps"],
        json!([
            {"name": "minis", "models": ["gpt-4o-mini", "gpt-4.1-mini*"], "cap_usd": "2.5",
             "cap_usd_micros": 2_500_000, "period": "day", "rpm": 100, "tpm": null},
            {"name": "claude", "models": ["claude-*"], "cap_usd": null,
             "cap_usd_micros": null, "period": null, "rpm": null, "tpm": 50_000},
        ])
    );
    assert_eq!((&key["rpm"], &key["tpm"]), (&json!(60), &Value::Null));
    // Only a group with a money cap has money to show.
    assert_eq!(names(&key["budget"]["model_caps"]), ["minis"]);

    // Read back: the same, in the list too.
    let (status, shown) = admin(&h, "GET", "/admin/v1/keys/agent", None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["model_caps"], key["model_caps"]);
    assert_eq!(shown["rpm"], 60);
    let (_, list) = admin(&h, "GET", "/admin/v1/keys?prefix=agent", None).await;
    assert_eq!(list["keys"][0]["model_caps"], key["model_caps"]);
    let (_, shown) = admin(&h, "GET", "/admin/v1/orgs/labs", None).await;
    assert_eq!(shown["model_caps"], org["model_caps"]);
    assert_eq!(shown["tpm"], 1_000_000);

    // The key's groups are its own; the org's show under the org.
    let budget = h.budget(&secret).await;
    assert_eq!(names(&budget["key"]["model_caps"]), ["minis"]);
    assert_eq!(names(&budget["org"]["model_caps"]), ["fours"]);

    // PATCH replaces the whole list; a rate limit not named stays.
    let (status, changed) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(
            json!({"model_caps": [group("nanos", &["gpt-4.1-nano*"], "1.00", "week")],
                    "rpm": null, "tpm": 9_000}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(names(&changed["model_caps"]), ["nanos"]);
    assert_eq!(changed["model_caps"][0]["cap_usd_micros"], 1_000_000);
    assert_eq!(
        (&changed["rpm"], &changed["tpm"]),
        (&Value::Null, &json!(9_000))
    );
    assert_eq!(
        named(&changed["budget"]["model_caps"], "nanos")["period"],
        "week"
    );
    let (_, changed) = admin(
        &h,
        "PATCH",
        "/admin/v1/keys/agent",
        Some(json!({"cap_usd": "11.00"})),
    )
    .await;
    assert_eq!(names(&changed["model_caps"]), ["nanos"]);
    assert_eq!(changed["tpm"], 9_000);
    // `null` and `[]` both clear the groups.
    for clear in [Value::Null, json!([])] {
        admin(
            &h,
            "PATCH",
            "/admin/v1/keys/agent",
            Some(json!({"model_caps": [group("x", &["x"], "1", "day")]})),
        )
        .await;
        let (status, cleared) = admin(
            &h,
            "PATCH",
            "/admin/v1/keys/agent",
            Some(json!({"model_caps": clear, "tpm": null})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{cleared}");
        assert_eq!(cleared["model_caps"], json!([]), "{clear}");
        assert_eq!(cleared["budget"]["model_caps"], json!([]));
        assert_eq!(cleared["tpm"], Value::Null);
    }

    let (status, org) = admin(
        &h,
        "PATCH",
        "/admin/v1/orgs/labs",
        Some(json!({"model_caps": null, "rpm": null, "tpm": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{org}");
    assert_eq!(org["model_caps"], json!([]));
    assert_eq!((&org["rpm"], &org["tpm"]), (&Value::Null, &json!(5)));
    let (_, org) = admin(
        &h,
        "PATCH",
        "/admin/v1/orgs/labs",
        Some(json!({"model_caps": [group("fours", &["gpt-4o*"], "40", "month")]})),
    )
    .await;
    assert_eq!(org["model_caps"][0]["cap_usd_micros"], 40_000_000);
    assert_eq!(org["tpm"], 5);

    // The audit trail keeps the groups as written.
    let (_, audit) = admin(&h, "GET", "/admin/v1/audit", None).await;
    let text = audit.to_string();
    assert!(text.contains("gpt-4.1-nano*"), "{text}");
}

#[tokio::test]
async fn a_bad_group_or_rate_is_refused_naming_its_field_and_changes_nothing() {
    let h = gateway().await;
    make_key(
        &h,
        json!({"id": "k", "cap_usd": "1.00", "period": "day", "rpm": 10,
               "model_caps": [group("minis", &["gpt-4o-mini"], "0.50", "day")]}),
    )
    .await;
    let (status, _) = admin(
        &h,
        "POST",
        "/admin/v1/orgs",
        Some(json!({"id": "o", "cap_usd": "1.00", "period": "day", "tpm": 10})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, key_before) = admin(&h, "GET", "/admin/v1/keys/k", None).await;
    let (_, org_before) = admin(&h, "GET", "/admin/v1/orgs/o", None).await;

    let minis = || group("minis", &["gpt-4o-mini"], "0.50", "day");
    let with = |field: &str, value: Value| {
        let mut bad = minis();
        bad[field] = value;
        bad
    };
    let without = |field: &str| {
        let mut bad = minis();
        bad.as_object_mut().unwrap().remove(field);
        bad
    };
    // Each bad body, the field it must name, and words of the message.
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"model_caps": [with("cap_usd", json!(50))]}),
            "model_caps[0].cap_usd",
            "decimal string",
        ),
        (
            json!({"model_caps": [with("cap_usd", json!("50 USD"))]}),
            "model_caps[0].cap_usd",
            "50 USD",
        ),
        (
            json!({"model_caps": [with("cap_usd", json!("-1"))]}),
            "model_caps[0].cap_usd",
            "",
        ),
        (
            json!({"model_caps": [minis(), with("cost_usd", json!("1"))]}),
            "model_caps[1].cost_usd",
            "unknown field",
        ),
        (
            json!({"model_caps": [with("period", json!("fortnight"))]}),
            "model_caps[0].period",
            "fortnight",
        ),
        (
            json!({"model_caps": [without("period")]}),
            "model_caps[0].period",
            "needs a period",
        ),
        (
            json!({"model_caps": [with("models", json!([]))]}),
            "model_caps[0].models",
            "matches no model",
        ),
        (
            json!({"model_caps": [with("models", json!(["[x"]))]}),
            "model_caps[0].models[0]",
            "glob",
        ),
        (
            json!({"model_caps": [with("models", json!("gpt-*"))]}),
            "model_caps[0].models",
            "list",
        ),
        (
            json!({"model_caps": [with("name", json!("two words"))]}),
            "model_caps[0].name",
            "not a group name",
        ),
        (
            json!({"model_caps": [without("name")]}),
            "model_caps[0].name",
            "required",
        ),
        (
            json!({"model_caps": [minis(), minis()]}),
            "model_caps[1].name",
            "names another group",
        ),
        (
            json!({"model_caps": [{"name": "empty", "models": ["x"]}]}),
            "model_caps[0].cap_usd",
            "caps something",
        ),
        (
            json!({"model_caps": [with("rpm", json!(0))]}),
            "model_caps[0].rpm",
            "0 admits nothing",
        ),
        (
            json!({"model_caps": [with("tpm", json!(2.5))]}),
            "model_caps[0].tpm",
            "whole number",
        ),
        (
            json!({"model_caps": "minis"}),
            "model_caps",
            "list of groups",
        ),
        (json!({"model_caps": [7]}), "model_caps[0]", "object"),
        (json!({"rpm": 0}), "rpm", "0 admits nothing"),
        (json!({"rpm": -5}), "rpm", "whole number"),
        (json!({"rpm": "60"}), "rpm", "whole number"),
        (json!({"tpm": 1.5}), "tpm", "whole number"),
        (json!({"tpm": 1u64 << 60}), "tpm", "too large"),
    ];
    for (bad, param, words) in cases {
        let mut requests = Vec::new();
        for (path, base) in [
            (
                "/admin/v1/keys",
                json!({"id": "new-k", "cap_usd": "1.00", "period": "day"}),
            ),
            (
                "/admin/v1/orgs",
                json!({"id": "new-o", "cap_usd": "1.00", "period": "day"}),
            ),
        ] {
            let mut body = base;
            for (field, value) in bad.as_object().unwrap() {
                body[field] = value.clone();
            }
            requests.push(("POST", path.to_owned(), body));
        }
        requests.push(("PATCH", "/admin/v1/keys/k".to_owned(), bad.clone()));
        requests.push(("PATCH", "/admin/v1/orgs/o".to_owned(), bad.clone()));
        for (method, path, body) in requests {
            let (status, error) = admin(&h, method, &path, Some(body.clone())).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{method} {path} {body}: {error}"
            );
            assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
            assert_eq!(
                error["error"]["param"], param,
                "{method} {path} {body}: {error}"
            );
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(words), "{body}: {message}");
        }
    }
    // Nothing was made, nothing changed.
    for path in ["/admin/v1/keys/new-k", "/admin/v1/orgs/new-o"] {
        let (status, _) = admin(&h, "GET", path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    let (_, key_after) = admin(&h, "GET", "/admin/v1/keys/k", None).await;
    let (_, org_after) = admin(&h, "GET", "/admin/v1/orgs/o", None).await;
    assert_eq!(key_after, key_before);
    assert_eq!(org_after, org_before);
    // The message of a value the check refused is the check's, named.
    let (_, error) = admin(&h, "PATCH", "/admin/v1/keys/k", Some(json!({"rpm": 0}))).await;
    assert_eq!(
        error["error"]["message"],
        "rpm: 0 admits nothing: set at least 1, or leave the field out for no limit"
    );
    // An unknown top-level field lists the new ones among the known.
    let (_, error) = admin(&h, "PATCH", "/admin/v1/keys/k", Some(json!({"rpn": 1}))).await;
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("model_caps, rpm, tpm"), "{message}");
}

/// Config-file limits: alice's two groups (one matches gpt-4o-mini, one
/// only claude), her `rpm`, and her org's group over every gpt-4o model.
fn config_limits() -> Setup {
    Setup {
        alice_extra: r#"rpm = 600
model_caps = [
  { name = "minis", models = ["gpt-4o-mini"], cap_usd = "2.00", period = "day", tpm = 1000000 },
  { name = "claude", models = ["claude-*"], cap_usd = "3.00", period = "day" },
]"#,
        org_extra: r#"model_caps = [{ name = "fours", models = ["gpt-4o*"], cap_usd = "50.00", period = "month" }]"#,
        ..Setup::with_admin_key(ADMIN)
    }
}

#[tokio::test]
async fn config_keys_show_their_groups_and_refuse_changes() {
    let h = start(config_limits()).await;
    let (status, alice) = admin(&h, "GET", "/admin/v1/keys/alice", None).await;
    assert_eq!(status, StatusCode::OK, "{alice}");
    assert_eq!(alice["source"], "config");
    assert_eq!(
        alice["model_caps"],
        json!([
            {"name": "minis", "models": ["gpt-4o-mini"], "cap_usd": "2.00",
             "cap_usd_micros": 2_000_000, "period": "day", "rpm": null, "tpm": 1_000_000},
            {"name": "claude", "models": ["claude-*"], "cap_usd": "3.00",
             "cap_usd_micros": 3_000_000, "period": "day", "rpm": null, "tpm": null},
        ])
    );
    assert_eq!((&alice["rpm"], &alice["tpm"]), (&json!(600), &Value::Null));
    assert_eq!(names(&alice["budget"]["model_caps"]), ["minis", "claude"]);
    let (_, acme) = admin(&h, "GET", "/admin/v1/orgs/acme", None).await;
    assert_eq!(names(&acme["model_caps"]), ["fours"]);
    assert_eq!(names(&acme["budget"]["model_caps"]), ["fours"]);
    // Bob, in the same org, has none of his own.
    let (_, bob) = admin(&h, "GET", "/admin/v1/keys/bob", None).await;
    assert_eq!(
        (&bob["model_caps"], &bob["rpm"]),
        (&json!([]), &Value::Null)
    );

    for (path, body) in [
        ("/admin/v1/keys/alice", json!({"rpm": 5})),
        ("/admin/v1/keys/alice", json!({"model_caps": null})),
        ("/admin/v1/orgs/acme", json!({"model_caps": []})),
    ] {
        let (status, error) = admin(&h, "PATCH", path, Some(body)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{error}");
        assert_eq!(error["error"]["code"], "config_managed");
    }
    let (_, again) = admin(&h, "GET", "/admin/v1/keys/alice", None).await;
    assert_eq!(again["model_caps"], alice["model_caps"]);
}

#[tokio::test]
async fn a_group_is_charged_what_its_key_was_for_the_models_it_matches() {
    let h = start(config_limits()).await;
    let before = h.budget(ALICE).await;
    for scope in ["key", "org"] {
        for group in before[scope]["model_caps"].as_array().unwrap() {
            assert_eq!(group["spent_usd_micros"], 0, "{group}");
            assert_eq!(group["remaining_usd_micros"], group["cap_usd_micros"]);
        }
    }
    let minis_cap = named(&before["key"]["model_caps"], "minis");
    assert_eq!(minis_cap["period"], "day");
    assert_eq!(minis_cap["period_id"], before["key"]["period_id"]);
    assert_eq!(minis_cap["resets_at"], before["key"]["resets_at"]);

    let mini = charged(&h, ALICE, "gpt-4o-mini").await;
    let budget = h.budget(ALICE).await;
    let minis = named(&budget["key"]["model_caps"], "minis");
    assert_eq!(minis["spent_usd_micros"], mini, "{budget}");
    assert_eq!(minis["reserved_usd_micros"], 0);
    assert_eq!(minis["remaining_usd_micros"], 2_000_000 - mini);
    assert_eq!(minis["cap_usd_micros"], 2_000_000);
    // A group that does not match the model is not charged.
    assert_eq!(
        named(&budget["key"]["model_caps"], "claude")["spent_usd_micros"],
        0
    );
    // The org's group matches too.
    let fours = named(&budget["org"]["model_caps"], "fours");
    assert_eq!(fours["spent_usd_micros"], mini, "{budget}");
    assert_eq!(fours["period"], "month");
    assert_eq!(fours["period_id"], budget["org"]["period_id"]);

    // A model only the org's group matches.
    let four = charged(&h, ALICE, "gpt-4o").await;
    let budget = h.budget(ALICE).await;
    assert_eq!(
        named(&budget["key"]["model_caps"], "minis")["spent_usd_micros"],
        mini
    );
    assert_eq!(
        named(&budget["key"]["model_caps"], "claude")["spent_usd_micros"],
        0
    );
    assert_eq!(
        named(&budget["org"]["model_caps"], "fours")["spent_usd_micros"],
        mini + four
    );
    assert_eq!(budget["key"]["spent_usd_micros"], mini + four);

    // The admin API shows the same state under the KEY's and ORG's budget.
    let (_, alice) = admin(&h, "GET", "/admin/v1/keys/alice", None).await;
    assert_eq!(alice["budget"]["model_caps"], budget["key"]["model_caps"]);
    let (_, acme) = admin(&h, "GET", "/admin/v1/orgs/acme", None).await;
    assert_eq!(acme["budget"]["model_caps"], budget["org"]["model_caps"]);

    // An API key's group, charged through the same path.
    let secret = make_key(
        &h,
        json!({"id": "made", "cap_usd": "5.00", "period": "total",
               "model_caps": [group("all-gpt", &["gpt-*"], "1.00", "total")]}),
    )
    .await;
    let cost = charged(&h, &secret, "gpt-4o-mini").await;
    let budget = h.budget(&secret).await;
    let all = named(&budget["key"]["model_caps"], "all-gpt");
    assert_eq!(all["spent_usd_micros"], cost);
    assert_eq!(
        (&all["period"], &all["resets_at"]),
        (&json!("total"), &Value::Null)
    );
    assert_eq!(budget["org"], Value::Null);
}
