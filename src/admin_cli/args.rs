//! The `tollgate admin` command line: each command's arguments, and the
//! light checks that turn a typo into a usage error (exit 2) before any
//! request is sent. Money stays the decimal string that was typed.

use clap::{Args, Subcommand};
use serde_json::{Map, Value};

use super::DEFAULT_URL;

/// The periods a cap may have, as `crate::period::Period` spells them.
const PERIODS: [&str; 6] = ["minute", "hour", "day", "week", "month", "total"];

/// How `--model-cap` is written, for its help and its usage errors.
const MODEL_CAP_SYNTAX: &str =
    "name=NAME,models=GLOB|GLOB,cap_usd=USD,period=PERIOD[,rpm=N][,tpm=N]";

/// What spend can be grouped by.
const SPEND_GROUPS: [&str; 6] = ["key", "org", "model", "run", "customer", "day"];

/// Where a key's calls name their customer.
const CUSTOMER_FROM: [&str; 2] = ["header", "body"];

/// Where the admin API is and how to print its answers; accepted anywhere
/// after the command's name.
#[derive(Debug, Clone, Args)]
pub struct Options {
    /// The gateway's admin address (its main listener unless
    /// `server.admin_listen` moves the admin routes).
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_ADMIN_URL",
        default_value = DEFAULT_URL,
        value_parser = base_url,
        display_order = 900
    )]
    pub url: http::Uri,
    /// Print the API's JSON answer as it came (pretty), for scripts.
    #[arg(long, global = true, display_order = 901)]
    pub json: bool,
}

/// The admin API's commands. The admin key comes from `TOLLGATE_ADMIN_KEY`.
// One is parsed per process (and kept boxed by `main`): its size is of no
// account.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Gateway keys: create, list, show, change, disable, rotate, delete.
    Keys {
        #[command(flatten)]
        options: Options,
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Orgs: caps shared by all of their keys.
    Orgs {
        #[command(flatten)]
        options: Options,
        #[command(subcommand)]
        command: OrgsCommand,
    },
    /// The customers (end users) a key's calls named, with their budgets.
    Customers {
        #[command(flatten)]
        options: Options,
        #[command(subcommand)]
        command: CustomersCommand,
    },
    /// Spend, tokens and calls, grouped by key, org, model, run, customer
    /// or day.
    Spend {
        #[command(flatten)]
        options: Options,
        #[command(flatten)]
        query: SpendQuery,
    },
    /// Charge or refund a key by hand, with a note (a ledger entry).
    Adjust {
        #[command(flatten)]
        options: Options,
        #[command(flatten)]
        adjustment: Adjustment,
    },
    /// The calls holding money right now: open reservations.
    Reservations {
        #[command(flatten)]
        options: Options,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print its secret (shown this once only).
    Create(NewKey),
    /// List keys with their budgets, a page at a time (or --all).
    List(KeyList),
    /// Show one key with its budget in the current period.
    Show {
        /// The key's id.
        id: String,
    },
    /// Change a key's cap, period, models, expiry, metadata, model groups,
    /// rate limits or customer template.
    #[command(override_usage = "tollgate admin keys set <ID> [OPTIONS]  (at least one change)")]
    Set(KeyUpdate),
    /// Refuse the key's calls until it is enabled again.
    Disable {
        /// The key's id.
        id: String,
    },
    /// Accept the key's calls again.
    Enable {
        /// The key's id.
        id: String,
    },
    /// Give the key a new secret; the old one stops working at once.
    Rotate {
        /// The key's id.
        id: String,
    },
    /// Delete the key; it stops working at once, its ledger stays.
    Delete {
        /// The key's id.
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct NewKey {
    /// The key's id (default: the server picks one).
    #[arg(long)]
    pub id: Option<String>,
    /// The org whose cap the key also counts against.
    #[arg(long)]
    pub org: Option<String>,
    /// The cap in USD per period, a decimal such as 25.00.
    #[arg(long, value_parser = usd)]
    pub cap_usd: String,
    /// How long the cap lasts before it starts again from zero.
    #[arg(long, value_parser = PERIODS)]
    pub period: String,
    /// Model globs the key may call, comma-separated (default: every model).
    #[arg(long, value_delimiter = ',')]
    pub models: Option<Vec<String>>,
    /// When the key stops working, RFC 3339 (2026-12-31T23:59:59Z).
    #[arg(long, value_parser = rfc3339)]
    pub expires_at: Option<String>,
    /// A JSON object kept with the key, e.g. '{"team":"search"}'.
    #[arg(long, value_parser = json_object)]
    pub metadata: Option<Map<String, Value>>,
    /// Requests per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate)]
    pub rpm: Option<u64>,
    /// Tokens (input and output) per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate)]
    pub tpm: Option<u64>,
    /// A model group, repeatable: calls to the models it matches also count
    /// against its own cap and rate limits.
    #[arg(
        long = "model-cap",
        value_name = "SPEC",
        value_parser = model_cap,
        long_help = MODEL_CAP_HELP
    )]
    pub model_caps: Vec<Map<String, Value>>,
    /// Each customer's cap in USD per --customer-period (customers are named
    /// by the x-tollgate-customer header).
    #[arg(long, value_parser = usd, requires = "customer_period")]
    pub customer_cap_usd: Option<String>,
    /// How long each customer's cap lasts before it starts again from zero.
    #[arg(long, value_parser = PERIODS)]
    pub customer_period: Option<String>,
    /// Requests per minute, at most, for each customer.
    #[arg(long, value_parser = rate)]
    pub customer_rpm: Option<u64>,
    /// Tokens (input and output) per minute, at most, for each customer.
    #[arg(long, value_parser = rate)]
    pub customer_tpm: Option<u64>,
    /// Where calls name their customer: the x-tollgate-customer header, or
    /// the body's end-user field (OpenAI's safety_identifier or user,
    /// Anthropic's metadata.user_id), else the header.
    #[arg(long, value_parser = CUSTOMER_FROM)]
    pub customer_from: Option<String>,
    /// Refuse a call that names no customer (400 customer_required).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub customer_required: Option<bool>,
}

#[derive(Debug, Subcommand)]
pub enum CustomersCommand {
    /// List a key's customers with each one's last call and budget, a page
    /// at a time (or --all).
    List(CustomerList),
}

#[derive(Debug, Args)]
pub struct CustomerList {
    /// The key whose customers to list.
    #[arg(long)]
    pub key: String,
    /// Customers per page (the server's default is 100, at most 1000).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Start after this customer id: the `next` of the page before.
    #[arg(long, conflicts_with = "all")]
    pub after: Option<String>,
    /// Follow `next` page after page until the list ends.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct KeyList {
    /// Only the keys of this org.
    #[arg(long)]
    pub org: Option<String>,
    #[command(flatten)]
    pub page: Page,
}

/// Which page of a list to read, and which ids it holds.
#[derive(Debug, Args)]
pub struct Page {
    /// Only the entries whose id starts with this (case-sensitive).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Entries per page (the server's default is 100, at most 1000).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Start after this id: the `next` of the page before.
    #[arg(long, conflicts_with = "all")]
    pub after: Option<String>,
    /// Follow `next` page after page until the list ends.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct KeyUpdate {
    /// The key's id.
    pub id: String,
    #[command(flatten)]
    pub change: KeyChange,
}

/// What `keys set` changes: at least one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
pub struct KeyChange {
    /// The new cap in USD per period; it applies from the next call.
    #[arg(long, value_parser = usd)]
    pub cap_usd: Option<String>,
    /// How long the cap lasts before it starts again from zero.
    #[arg(long, value_parser = PERIODS)]
    pub period: Option<String>,
    /// The model globs the key may call, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub models: Option<Vec<String>>,
    /// When the key stops working, RFC 3339.
    #[arg(long, value_parser = rfc3339, conflicts_with = "no_expiry")]
    pub expires_at: Option<String>,
    /// The key never expires.
    #[arg(long)]
    pub no_expiry: bool,
    /// A JSON object kept with the key; replaces the one it had.
    #[arg(long, value_parser = json_object)]
    pub metadata: Option<Map<String, Value>>,
    /// Requests per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate, conflicts_with = "no_rpm")]
    pub rpm: Option<u64>,
    /// No requests-per-minute limit.
    #[arg(long)]
    pub no_rpm: bool,
    /// Tokens (input and output) per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate, conflicts_with = "no_tpm")]
    pub tpm: Option<u64>,
    /// No tokens-per-minute limit.
    #[arg(long)]
    pub no_tpm: bool,
    /// A model group, repeatable; the groups given replace all it had.
    #[arg(
        long = "model-cap",
        value_name = "SPEC",
        value_parser = model_cap,
        conflicts_with = "no_model_caps",
        long_help = MODEL_CAP_SET_HELP
    )]
    pub model_caps: Vec<Map<String, Value>>,
    /// Remove every model group.
    #[arg(long)]
    pub no_model_caps: bool,
    /// Each customer's cap in USD per customer period.
    #[arg(long, value_parser = usd, conflicts_with = "no_customer_cap_usd")]
    pub customer_cap_usd: Option<String>,
    /// No cap per customer.
    #[arg(long)]
    pub no_customer_cap_usd: bool,
    /// How long each customer's cap lasts before it starts again from zero.
    #[arg(long, value_parser = PERIODS, conflicts_with = "no_customer_period")]
    pub customer_period: Option<String>,
    /// Remove the customer period (with --no-customer-cap-usd).
    #[arg(long)]
    pub no_customer_period: bool,
    /// Requests per minute, at most, for each customer.
    #[arg(long, value_parser = rate, conflicts_with = "no_customer_rpm")]
    pub customer_rpm: Option<u64>,
    /// No requests-per-minute limit per customer.
    #[arg(long)]
    pub no_customer_rpm: bool,
    /// Tokens (input and output) per minute, at most, for each customer.
    #[arg(long, value_parser = rate, conflicts_with = "no_customer_tpm")]
    pub customer_tpm: Option<u64>,
    /// No tokens-per-minute limit per customer.
    #[arg(long)]
    pub no_customer_tpm: bool,
    /// Where calls name their customer: header or body.
    #[arg(long, value_parser = CUSTOMER_FROM)]
    pub customer_from: Option<String>,
    /// Refuse (true) or accept (false) a call that names no customer.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub customer_required: Option<bool>,
}

#[derive(Debug, Subcommand)]
pub enum OrgsCommand {
    /// Create an org with its own cap.
    Create(NewOrg),
    /// List orgs with their budgets, a page at a time (or --all).
    List(Page),
    /// Show one org with its budget in the current period.
    Show {
        /// The org's id.
        id: String,
    },
    /// Change an org's cap, period, model groups or rate limits.
    #[command(override_usage = "tollgate admin orgs set <ID> [OPTIONS]  (at least one change)")]
    Set(OrgUpdate),
    /// Delete an org that has no keys left.
    Delete {
        /// The org's id.
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct NewOrg {
    /// The org's id.
    #[arg(long)]
    pub id: String,
    /// The cap in USD per period, a decimal such as 500.00.
    #[arg(long, value_parser = usd)]
    pub cap_usd: String,
    /// How long the cap lasts before it starts again from zero.
    #[arg(long, value_parser = PERIODS)]
    pub period: String,
    /// Requests per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate)]
    pub rpm: Option<u64>,
    /// Tokens (input and output) per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate)]
    pub tpm: Option<u64>,
    /// A model group, repeatable: calls to the models it matches also count
    /// against its own cap and rate limits.
    #[arg(
        long = "model-cap",
        value_name = "SPEC",
        value_parser = model_cap,
        long_help = MODEL_CAP_HELP
    )]
    pub model_caps: Vec<Map<String, Value>>,
}

#[derive(Debug, Args)]
pub struct OrgUpdate {
    /// The org's id.
    pub id: String,
    #[command(flatten)]
    pub change: OrgChange,
}

/// What `orgs set` changes: at least one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
pub struct OrgChange {
    /// The new cap in USD per period.
    #[arg(long, value_parser = usd)]
    pub cap_usd: Option<String>,
    /// How long the cap lasts before it starts again from zero.
    #[arg(long, value_parser = PERIODS)]
    pub period: Option<String>,
    /// Requests per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate, conflicts_with = "no_rpm")]
    pub rpm: Option<u64>,
    /// No requests-per-minute limit.
    #[arg(long)]
    pub no_rpm: bool,
    /// Tokens (input and output) per minute, at most, over all of its calls.
    #[arg(long, value_parser = rate, conflicts_with = "no_tpm")]
    pub tpm: Option<u64>,
    /// No tokens-per-minute limit.
    #[arg(long)]
    pub no_tpm: bool,
    /// A model group, repeatable; the groups given replace all it had.
    #[arg(
        long = "model-cap",
        value_name = "SPEC",
        value_parser = model_cap,
        conflicts_with = "no_model_caps",
        long_help = MODEL_CAP_SET_HELP
    )]
    pub model_caps: Vec<Map<String, Value>>,
    /// Remove every model group.
    #[arg(long)]
    pub no_model_caps: bool,
}

#[derive(Debug, Args)]
pub struct SpendQuery {
    /// One row per key, org, model, agent run, customer (key/customer) or
    /// day.
    #[arg(long, value_parser = SPEND_GROUPS)]
    pub group_by: String,
    /// Only this key's spend.
    #[arg(long)]
    pub key: Option<String>,
    /// Only this org's spend.
    #[arg(long)]
    pub org: Option<String>,
    /// The first day counted, e.g. 2026-11-01.
    #[arg(long)]
    pub from: Option<String>,
    /// The last day counted.
    #[arg(long)]
    pub to: Option<String>,
    /// Print the API's CSV as it came.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
}

#[derive(Debug, Args)]
pub struct Adjustment {
    /// The key whose spend moves (and its org's).
    #[arg(long)]
    pub key: String,
    /// USD added to the spend in the current period; negative to refund,
    /// e.g. -0.25.
    #[arg(long, allow_negative_numbers = true, value_parser = signed_usd)]
    pub amount_usd: String,
    /// Why: kept in the ledger entry.
    #[arg(long)]
    pub note: String,
}

/// `--model-cap` in full, for `create`.
const MODEL_CAP_HELP: &str = "A model group, repeatable: calls to the models it matches also \
count against the group's own cap and rate limits.

Written name=NAME,models=GLOB|GLOB,cap_usd=USD,period=PERIOD[,rpm=N][,tpm=N]: \
fields separated by commas, the model globs by `|`. name and models are \
required, and at least one of cap_usd (with period), rpm and tpm. \
period is one of minute, hour, day, week, month, total.

Example: --model-cap 'name=opus,models=claude-opus-*|claude-3-opus*,cap_usd=50.00,period=day,rpm=10'";

/// `--model-cap` in full, for `set`.
const MODEL_CAP_SET_HELP: &str = "A model group, repeatable; the groups given replace every \
group it had (--no-model-caps removes them all).

Written name=NAME,models=GLOB|GLOB,cap_usd=USD,period=PERIOD[,rpm=N][,tpm=N]: \
fields separated by commas, the model globs by `|`. name and models are \
required, and at least one of cap_usd (with period), rpm and tpm. \
period is one of minute, hour, day, week, month, total.

Example: --model-cap 'name=opus,models=claude-opus-*|claude-3-opus*,cap_usd=50.00,period=day,rpm=10'";

// === argument checks ===

/// An `http` or `https` URL with a host.
fn base_url(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("not a URL like {DEFAULT_URL}: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err(format!("not an http(s) URL like {DEFAULT_URL}")),
    }
}

/// A non-negative decimal USD amount, passed on as typed.
fn usd(text: &str) -> Result<String, String> {
    crate::money::parse_usd(text)
        .map(|_| text.trim().to_owned())
        .map_err(|e| e.to_string())
}

/// A decimal USD amount that may be negative, passed on as typed.
fn signed_usd(text: &str) -> Result<String, String> {
    let text = text.trim();
    usd(text.strip_prefix('-').unwrap_or(text)).map(|_| text.to_owned())
}

fn rfc3339(text: &str) -> Result<String, String> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(|_| text.trim().to_owned())
        .map_err(|e| format!("not an RFC 3339 time like 2026-12-31T23:59:59Z: {e}"))
}

/// A rate limit: a whole number, at least 1.
fn rate(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("0 admits nothing: at least 1 (--no-rpm/--no-tpm removes a limit)".to_owned()),
        Ok(limit) => Ok(limit),
        Err(_) => Err(format!("not a whole number: {text:?}")),
    }
}

/// `--model-cap name=opus,models=claude-opus-*|claude-3-opus*,cap_usd=50.00,period=day`
/// as the group's JSON object: money the decimal string typed, rates
/// numbers. Only the shape is checked here; the server checks the values.
fn model_cap(text: &str) -> Result<Map<String, Value>, String> {
    let mut group = Map::new();
    for part in text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let Some((name, value)) = part.split_once('=') else {
            return Err(format!(
                "{part:?} is not FIELD=VALUE; write {MODEL_CAP_SYNTAX}"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let value = match name {
            "name" => Value::from(value),
            "models" => value
                .split('|')
                .map(str::trim)
                .filter(|glob| !glob.is_empty())
                .map(Value::from)
                .collect(),
            "cap_usd" => Value::from(usd(value).map_err(|e| format!("cap_usd: {e}"))?),
            "period" if PERIODS.contains(&value) => Value::from(value),
            "period" => {
                return Err(format!(
                    "period {value:?} is not one of {}",
                    PERIODS.join(", ")
                ))
            }
            "rpm" | "tpm" => Value::from(rate(value).map_err(|e| format!("{name}: {e}"))?),
            other => {
                return Err(format!(
                "unknown field {other:?}: a group has name, models, cap_usd, period, rpm and tpm"
            ))
            }
        };
        if group.insert(name.to_owned(), value).is_some() {
            return Err(format!("{name} is given twice"));
        }
    }
    for required in ["name", "models"] {
        let given = match group.get(required) {
            Some(Value::String(text)) => !text.is_empty(),
            Some(Value::Array(items)) => !items.is_empty(),
            _ => false,
        };
        if !given {
            return Err(format!("{required}= is missing; write {MODEL_CAP_SYNTAX}"));
        }
    }
    Ok(group)
}

fn json_object(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err("not a JSON object like '{\"team\":\"search\"}'".to_owned()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("admin").chain(args.iter().copied()))
            .map(|cli| cli.command)
    }

    #[test]
    fn the_periods_offered_are_the_gateways_periods() {
        for period in PERIODS {
            let parsed: crate::period::Period = period.parse().unwrap();
            assert_eq!(parsed.as_str(), period);
        }
    }

    #[test]
    fn options_are_accepted_after_the_subcommand() {
        let command = parse(&[
            "keys",
            "list",
            "--all",
            "--json",
            "--url",
            "http://10.0.0.1:9000",
        ])
        .unwrap();
        let Command::Keys { options, command } = command else {
            panic!("{command:?}");
        };
        assert!(options.json);
        assert_eq!(options.url.to_string(), "http://10.0.0.1:9000/");
        assert!(matches!(
            command,
            KeysCommand::List(KeyList {
                page: Page { all: true, .. },
                ..
            })
        ));
    }

    #[test]
    fn money_is_checked_lightly_and_passed_on_as_typed() {
        let command = parse(&[
            "adjust",
            "--key",
            "alice",
            "--amount-usd",
            "-0.25",
            "--note",
            "refund",
        ])
        .unwrap();
        let Command::Adjust { adjustment, .. } = command else {
            panic!("{command:?}");
        };
        assert_eq!(adjustment.amount_usd, "-0.25");
        for bad in ["25$", "-1", "1e3", "0.0000001"] {
            let error = parse(&["keys", "create", "--cap-usd", bad, "--period", "day"]);
            assert!(error.is_err(), "{bad} was accepted");
        }
        assert!(parse(&[
            "keys",
            "create",
            "--cap-usd",
            "25.00",
            "--period",
            "fortnight"
        ])
        .is_err());
    }

    #[test]
    fn keys_set_needs_a_change_and_one_expiry() {
        assert!(parse(&["keys", "set", "alice"]).is_err());
        assert!(parse(&[
            "keys",
            "set",
            "alice",
            "--expires-at",
            "2026-12-31T00:00:00Z",
            "--no-expiry"
        ])
        .is_err());
        assert!(parse(&["keys", "set", "alice", "--no-expiry"]).is_ok());
        assert!(parse(&["keys", "set", "alice", "--metadata", "[1]"]).is_err());
        assert!(parse(&["orgs", "set", "acme"]).is_err());
    }

    #[test]
    fn a_model_cap_is_fields_separated_by_commas_and_globs_by_bars() {
        let group = model_cap(
            "name=opus, models=claude-opus-*|claude-3-opus*,cap_usd=50.00,period=day,rpm=10",
        )
        .unwrap();
        assert_eq!(
            Value::Object(group),
            serde_json::json!({"name": "opus", "models": ["claude-opus-*", "claude-3-opus*"],
                               "cap_usd": "50.00", "period": "day", "rpm": 10})
        );
        for bad in [
            "models=gpt-*,cap_usd=1,period=day",
            "name=a,cap_usd=1,period=day",
            "name=a,models=x,cap_usd=1e3,period=day",
            "name=a,models=x,cap_usd=1,period=fortnight",
            "name=a,models=x,rpm=0",
            "name=a,models=x,rpm=ten",
            "name=a,models=x,tpm=1,tpm=2",
            "name=a,models=x,cap=1",
            "name=a,models=x,opus",
        ] {
            assert!(model_cap(bad).is_err(), "{bad} was accepted");
        }
        let command = parse(&[
            "keys",
            "create",
            "--cap-usd",
            "25",
            "--period",
            "day",
            "--rpm",
            "60",
            "--model-cap",
            "name=a,models=x,tpm=5",
            "--model-cap",
            "name=b,models=y,cap_usd=1,period=day",
        ])
        .unwrap();
        let Command::Keys {
            command: KeysCommand::Create(new),
            ..
        } = command
        else {
            panic!("{command:?}");
        };
        assert_eq!(
            (new.rpm, new.tpm, new.model_caps.len()),
            (Some(60), None, 2)
        );
        assert!(parse(&[
            "keys",
            "create",
            "--cap-usd",
            "1",
            "--period",
            "day",
            "--rpm",
            "0"
        ])
        .is_err());
        assert!(parse(&["keys", "set", "k", "--rpm", "5", "--no-rpm"]).is_err());
        assert!(parse(&["keys", "set", "k", "--no-model-caps"]).is_ok());
        assert!(parse(&[
            "orgs",
            "set",
            "acme",
            "--model-cap",
            "name=a,models=x,rpm=1",
            "--no-model-caps"
        ])
        .is_err());
        assert!(parse(&["orgs", "set", "acme", "--no-tpm"]).is_ok());
    }

    #[test]
    fn a_customer_template_takes_its_flags_and_set_clears_them() {
        let command = parse(&[
            "keys",
            "create",
            "--cap-usd",
            "25",
            "--period",
            "day",
            "--customer-cap-usd",
            "0.50",
            "--customer-period",
            "day",
            "--customer-rpm",
            "10",
            "--customer-from",
            "body",
            "--customer-required",
        ])
        .unwrap();
        let Command::Keys {
            command: KeysCommand::Create(new),
            ..
        } = command
        else {
            panic!("{command:?}");
        };
        assert_eq!(new.customer_cap_usd.as_deref(), Some("0.50"));
        assert_eq!(new.customer_period.as_deref(), Some("day"));
        assert_eq!((new.customer_rpm, new.customer_tpm), (Some(10), None));
        assert_eq!(new.customer_from.as_deref(), Some("body"));
        assert_eq!(new.customer_required, Some(true));
        let base = ["keys", "create", "--cap-usd", "1", "--period", "day"];
        let with = |more: &[&'static str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(more);
            parse(&args)
        };
        for bad in [
            &["--customer-cap-usd", "1e3", "--customer-period", "day"][..],
            &["--customer-cap-usd", "1"],
            &["--customer-period", "fortnight"],
            &["--customer-from", "cookie"],
            &["--customer-rpm", "0"],
            &["--customer-required=maybe"],
        ] {
            assert!(with(bad).is_err(), "{bad:?} was accepted");
        }
        let Command::Keys {
            command: KeysCommand::Create(new),
            ..
        } = with(&["--customer-required=false"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(new.customer_required, Some(false));
        assert!(parse(&["keys", "set", "k", "--no-customer-cap-usd"]).is_ok());
        assert!(parse(&["keys", "set", "k", "--customer-required=false"]).is_ok());
        assert!(parse(&[
            "keys",
            "set",
            "k",
            "--customer-tpm",
            "5",
            "--no-customer-tpm"
        ])
        .is_err());
        let list = parse(&["customers", "list", "--key", "k", "--limit", "5", "--all"]).unwrap();
        assert!(matches!(
            list,
            Command::Customers {
                command: CustomersCommand::List(CustomerList { all: true, .. }),
                ..
            }
        ));
        assert!(parse(&["customers", "list"]).is_err(), "--key is required");
        assert!(parse(&["spend", "--group-by", "customer"]).is_ok());
    }

    #[test]
    fn csv_and_json_do_not_mix() {
        assert!(parse(&["spend", "--group-by", "day", "--csv", "--json"]).is_err());
        assert!(parse(&["spend", "--group-by", "week"]).is_err());
        assert!(parse(&["spend", "--group-by", "model", "--csv"]).is_ok());
    }

    #[test]
    fn a_url_must_be_http() {
        assert!(parse(&["reservations", "--url", "ftp://x"]).is_err());
        assert!(parse(&["reservations", "--url", "localhost"]).is_err());
        assert!(parse(&["reservations", "--url", "https://gw.example/admin-proxy"]).is_ok());
    }
}
