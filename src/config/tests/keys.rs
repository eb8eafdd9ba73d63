//! `[[orgs]]`, `[[keys]]` and `[alerts]`: caps and periods, key hashes,
//! model allow-lists, and the thresholds and webhook of spending alerts.

use super::{alice_hash, base, error_after, load, load_with};
use crate::config::hash_key;

#[test]
fn cap_errors_read_like_the_reference() {
    let message = error_after("cap_usd = \"25.00\"", "cap_usd = \"abc\"");
    assert_eq!(
        message,
        "test.toml: keys[0].cap_usd: \"abc\" is not a decimal number like \"25.00\""
    );
}

#[test]
fn period_errors_list_the_periods() {
    let message = error_after("period = \"month\"", "period = \"year\"");
    assert_eq!(
        message,
        "test.toml: orgs[0].period: unknown period \"year\": \
         expected one of minute, hour, day, week, month, total"
    );
}

#[test]
fn duplicate_key_hashes_are_rejected() {
    let duplicate = format!("key_sha256 = \"{}\"", hex::encode(hash_key("bob-raw-key")));
    let message = error_after(&format!("key_sha256 = \"{}\"", alice_hash()), &duplicate);
    assert!(
        message.starts_with("test.toml: keys[1].key_env: "),
        "{message}"
    );
    assert!(message.contains("\"alice\""), "{message}");
}

#[test]
fn key_env_is_hashed_at_load_and_must_be_set() {
    let config = load_with(&base(), &[("BOB_KEY", "bob-raw-key")]).unwrap();
    assert_eq!(config.keys[1].key_sha256, hash_key("bob-raw-key"));
    for vars in [&[][..], &[("BOB_KEY", "")][..]] {
        let message = load_with(&base(), vars).unwrap_err().to_string();
        assert_eq!(
            message,
            "test.toml: keys[1].key_env: environment variable BOB_KEY is unset or empty"
        );
    }
}

#[test]
fn allows_model_checks_the_key_allow_list() {
    let config = load(&base()).unwrap();
    let alice = &config.keys[0];
    assert!(alice.allows_model("gpt-4o-mini"));
    assert!(alice.allows_model("claude-sonnet-4-5"));
    assert!(!alice.allows_model("gpt-4o"));
    assert!(!alice.allows_model("gpt-4o-mini-2024-07-18"));
    let bob = &config.keys[1];
    assert!(bob.allows_model("anything-at-all"));
}

#[test]
fn hash_key_is_sha256() {
    assert_eq!(
        hex::encode(hash_key("tg-demo-key")),
        "e7aab4b439baa8c615eb31e352f5b4259085813fbcd95a65a5a346a6bdfb1bb3"
    );
}

#[test]
fn alerts_need_a_webhook_and_its_secret_and_thresholds_ascend() {
    let config = load(&base()).unwrap();
    assert!(config.alerts.webhook.is_none());
    assert!(config.keys[0].alert_at.is_empty());

    let with_alerts = format!(
        "{}\n[alerts]\nwebhook_url = \"https://ops.example.com/hook\"\nsecret_env = \"HOOK_SECRET\"\n",
        base()
            .replace(
                "models = [\"gpt-4o-mini\", \"claude-*\"]",
                "models = [\"gpt-4o-mini\", \"claude-*\"]\nalert_at = [\"0.5\", \"0.8\"]"
            )
            .replace(
                "period = \"month\"\n",
                "period = \"month\"\nalert_at = [\"0.9\"]\n"
            )
    );
    let vars = [("BOB_KEY", "bob-raw-key"), ("HOOK_SECRET", "s3cret")];
    let config = load_with(&with_alerts, &vars).unwrap();
    let webhook = config.alerts.webhook.as_ref().unwrap();
    assert_eq!(webhook.url.to_string(), "https://ops.example.com/hook");
    assert_eq!(webhook.secret.expose(), "s3cret");
    assert!(!format!("{config:?}").contains("s3cret"));
    let shown: Vec<&str> = config.keys[0].alert_at.iter().map(|t| t.as_str()).collect();
    assert_eq!(shown, ["0.5", "0.8"]);
    assert_eq!(config.orgs[0].alert_at[0].ppm(), 900_000);

    let message =
        |text: &str, vars: &[(&str, &str)]| load_with(text, vars).unwrap_err().to_string();
    let unset = message(&with_alerts, &[("BOB_KEY", "bob-raw-key")]);
    assert!(
        unset.contains("alerts.secret_env") && unset.contains("HOOK_SECRET"),
        "{unset}"
    );
    let no_secret = with_alerts.replace("secret_env = \"HOOK_SECRET\"\n", "");
    assert!(message(&no_secret, &vars).contains("alerts.secret_env"));
    let ftp = with_alerts.replace("https://ops.example.com/hook", "ftp://ops.example.com");
    assert!(message(&ftp, &vars).contains("alerts.webhook_url"));
    let descending = with_alerts.replace("[\"0.5\", \"0.8\"]", "[\"0.8\", \"0.5\"]");
    assert!(message(&descending, &vars).contains("keys[0].alert_at"));
    let too_high = with_alerts.replace("[\"0.9\"]", "[\"1.5\"]");
    assert!(message(&too_high, &vars).contains("orgs[0].alert_at"));
}
