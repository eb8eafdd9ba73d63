//! `tollgate admin keys|orgs|customers|spend|adjust|reservations`: the command-line
//! client of the gateway's admin API (docs/admin.md).
//!
//! A command line (`args`) becomes one HTTP request to the admin routes
//! (`request`), is sent with the admin key from `TOLLGATE_ADMIN_KEY`
//! (`client`), and the answer is printed either as the API's own JSON
//! (`--json`, for scripts) or as aligned tables with money in USD
//! (`render`, laid out by `layout`).
//!
//! The server validates every field. The client checks only what it can name
//! before a round trip (a money amount that is not a decimal, an unknown
//! period, metadata that is not a JSON object), so a typo is a usage error;
//! money is sent as the decimal string that was typed, never as a number.
//!
//! Exit status: 0 when the API agreed; 1 when it answered an error (its
//! status, message and code are printed) or could not be reached (the URL is
//! named) or the admin key is missing; 2 for a usage error, as clap does.

mod args;
mod client;
mod layout;
mod render;
mod request;

use std::collections::HashSet;
use std::io::Write;

use bytes::Bytes;
use serde_json::{Map, Value};

pub use args::{
    Adjustment, Command, CustomerList, CustomersCommand, KeyChange, KeyList, KeyUpdate,
    KeysCommand, NewKey, NewOrg, Options, OrgChange, OrgUpdate, OrgsCommand, Page, SpendQuery,
};
use client::{AdminApi, Answer};
pub use client::{AdminError, ApiFailure};
use render::View;
use request::ApiRequest;

/// Where the admin API listens unless `--url` or `TOLLGATE_ADMIN_URL` say.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The environment variable holding the admin key. Never a flag: a flag's
/// value would be seen by every user of the machine in the process list.
pub const ADMIN_KEY_ENV: &str = "TOLLGATE_ADMIN_KEY";

// === running a command ===

/// What a command asks of the API and how its answer is shown.
struct Plan {
    request: ApiRequest,
    view: View,
    /// `--all`: the list's field whose pages are read to the end.
    follow: Option<&'static str>,
}

/// Runs one admin command: reads the admin key from the environment, calls
/// the API and prints its answer on standard output.
pub async fn run(command: Command) -> Result<(), AdminError> {
    let admin_key = client::admin_key_from_env()?;
    let (options, plan) = plan(command);
    let api = AdminApi::new(options.url, admin_key)?;
    let answer = api.send(&plan.request).await?;
    let answer = check(answer, options.json)?;
    let body = match plan.follow {
        Some(field) => {
            read_all_pages(&api, &plan.request, field, answer.body, options.json).await?
        }
        None => answer.body,
    };
    // CSV is printed as it came whatever the output mode.
    let text = if options.json && plan.view != View::Raw {
        layout::json(&body)
    } else {
        render::human(&plan.view, &body).map_err(|detail| api.bad_answer(detail))?
    };
    write_stdout(&text)
}

fn plan(command: Command) -> (Options, Plan) {
    let simple = |request, view| Plan {
        request,
        view,
        follow: None,
    };
    match command {
        Command::Keys { options, command } => {
            let plan = match command {
                KeysCommand::Create(new) => simple(request::create_key(&new), View::KeySecret),
                KeysCommand::List(list) => Plan {
                    request: request::list_keys(&list),
                    view: View::Keys,
                    follow: list.page.all.then_some("keys"),
                },
                KeysCommand::Show { id } => simple(request::show("keys", &id), View::Key),
                KeysCommand::Set(update) => simple(request::update_key(&update), View::Key),
                KeysCommand::Disable { id } => simple(request::set_disabled(&id, true), View::Key),
                KeysCommand::Enable { id } => simple(request::set_disabled(&id, false), View::Key),
                KeysCommand::Rotate { id } => simple(request::rotate_key(&id), View::KeySecret),
                KeysCommand::Delete { id } => simple(
                    request::delete("keys", &id),
                    View::Deleted { what: "key", id },
                ),
            };
            (options, plan)
        }
        Command::Orgs { options, command } => {
            let plan = match command {
                OrgsCommand::Create(new) => simple(request::create_org(&new), View::Org),
                OrgsCommand::List(page) => Plan {
                    request: request::list_orgs(&page),
                    view: View::Orgs,
                    follow: page.all.then_some("orgs"),
                },
                OrgsCommand::Show { id } => simple(request::show("orgs", &id), View::Org),
                OrgsCommand::Set(update) => simple(request::update_org(&update), View::Org),
                OrgsCommand::Delete { id } => simple(
                    request::delete("orgs", &id),
                    View::Deleted { what: "org", id },
                ),
            };
            (options, plan)
        }
        Command::Customers { options, command } => {
            let plan = match command {
                CustomersCommand::List(list) => Plan {
                    request: request::list_customers(&list),
                    view: View::Customers,
                    follow: list.all.then_some("customers"),
                },
            };
            (options, plan)
        }
        Command::Spend { options, query } => {
            let view = if query.csv { View::Raw } else { View::Spend };
            (options, simple(request::spend(&query), view))
        }
        Command::Adjust {
            options,
            adjustment,
        } => (options, simple(request::adjust(&adjustment), View::Entry)),
        Command::Reservations { options } => {
            (options, simple(request::reservations(), View::Reservations))
        }
    }
}

/// The answer when the API agreed; its error otherwise. With `--json` an
/// error's body is printed too, so a script can read its `code`.
fn check(answer: Answer, json: bool) -> Result<Answer, AdminError> {
    if answer.status.is_success() {
        return Ok(answer);
    }
    if json && !answer.body.is_empty() {
        write_stdout(&layout::json(&answer.body))?;
    }
    Err(answer.into_error())
}

/// Reads the pages after `first` by their `next` ids and answers one body
/// holding every entry of `field`, with `"next": null` (re-encoded, so with
/// each entry's fields sorted by name).
async fn read_all_pages(
    api: &AdminApi,
    request: &ApiRequest,
    field: &'static str,
    first: Bytes,
    json: bool,
) -> Result<Bytes, AdminError> {
    let mut entries = Vec::new();
    let mut body = first;
    let mut seen = HashSet::new();
    loop {
        let page: Value = serde_json::from_slice(&body)
            .map_err(|e| api.bad_answer(format!("a page is not JSON: {e}")))?;
        let Some(items) = page.get(field).and_then(Value::as_array) else {
            return Err(api.bad_answer(format!("a page has no \"{field}\" list")));
        };
        entries.extend(items.iter().cloned());
        let next = match page.get("next") {
            Some(Value::String(next)) => next.clone(),
            None | Some(Value::Null) => break,
            Some(other) => return Err(api.bad_answer(format!("\"next\" is {other}"))),
        };
        // A server that hands out the same page twice would loop forever.
        if !seen.insert(next.clone()) {
            return Err(api.bad_answer(format!("\"next\" repeats {next:?}")));
        }
        let answer = api.send(&request.after(&next)).await?;
        body = check(answer, json)?.body;
    }
    let mut all = Map::new();
    all.insert(field.to_owned(), Value::Array(entries));
    all.insert("next".to_owned(), Value::Null);
    Ok(Bytes::from(Value::Object(all).to_string()))
}

fn write_stdout(text: &str) -> Result<(), AdminError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(AdminError::Output)
}
