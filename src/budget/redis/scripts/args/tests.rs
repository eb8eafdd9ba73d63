//! Each script's header, body and Rust caller name the same arguments.

use super::*;
use crate::budget::redis::scripts::{ADJUST, DRAIN, RESERVE, SETTLE, STATE, SWEEP};

/// Each script's file, its source and the names its Rust caller binds.
fn scripts() -> [(&'static str, &'static str, &'static [&'static str]); 6] {
    [
        ("reserve.lua", RESERVE, ReserveArgs::NAMES),
        ("settle.lua", SETTLE, SettleArgs::NAMES),
        ("adjust.lua", ADJUST, AdjustArgs::NAMES),
        ("sweep.lua", SWEEP, SweepArgs::NAMES),
        ("drain.lua", DRAIN, DrainArgs::NAMES),
        ("state.lua", STATE, StateArgs::NAMES),
    ]
}

fn word(text: &str) -> String {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The argument names a script's header lists: each line of its ARGV
/// section indented by exactly two spaces starts with one.
fn header_names(source: &str) -> Vec<String> {
    let header = &source[..source.find("]]").expect("a header comment")];
    let start = header.find("\nARGV").expect("an ARGV section");
    let end = start
        + header[start..]
            .find("\nReturns")
            .expect("a Returns section");
    header[start..end]
        .lines()
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .map(|line| word(line.trim_start()))
        .collect()
}

/// The body of a script: what follows its header.
fn body(source: &str) -> &str {
    &source[source.find("]]").expect("a header comment")..]
}

/// The names a script's body reads as `argv.<name>`.
fn body_names(source: &str) -> Vec<String> {
    body(source).split("argv.").skip(1).map(word).collect()
}

#[test]
fn every_script_header_lists_the_arguments_its_caller_binds_in_order() {
    for (file, source, names) in scripts() {
        assert_eq!(
            header_names(source),
            names,
            "{file}: its header and its caller disagree"
        );
    }
}

#[test]
fn every_script_body_reads_each_argument_by_name_and_no_other() {
    for (file, source, names) in scripts() {
        let read = body_names(source);
        for name in &read {
            assert!(
                names.contains(&name.as_str()),
                "{file} reads argv.{name}, which its caller does not bind"
            );
        }
        for name in names {
            assert!(
                read.iter().any(|r| r == name),
                "{file} never reads argv.{name}"
            );
        }
        assert!(
            !body(source).contains("ARGV["),
            "{file} reads ARGV by position"
        );
    }
}

#[test]
fn a_header_listing_the_arguments_in_another_order_is_told_apart() {
    let swapped =
        "--[[ x\nARGV, by name:\n  amount: the most\n    held\n  exec_id\nReturns: {}\n]]\n";
    assert_eq!(header_names(swapped), ["amount", "exec_id"]);
    assert_ne!(header_names(swapped), ReserveArgs::NAMES[..2]);
}

#[test]
fn the_binding_puts_each_name_at_its_position() {
    assert_eq!(
        bind_argv(&["exec_id", "amount"]),
        "local argv = { exec_id = ARGV[1], amount = ARGV[2] }\n"
    );
    let args = StateArgs {
        kind: "key",
        id: "k".to_owned(),
        period: "day",
    };
    assert_eq!(args.argv(), ["key", "k", "day"]);
    assert_eq!(Flag(true).to_string(), "1");
    assert_eq!(Flag(false).to_string(), "0");
}

#[test]
fn caps_are_five_fields_each_joined_by_a_bar() {
    use crate::budget::{Meter, ScopeKind};
    let cap = |kind, id: &str, meter, period, limit| Cap {
        kind,
        id: id.to_owned(),
        meter,
        period,
        limit,
    };
    assert_eq!(caps_arg(&[]).unwrap(), "");
    let caps = [
        cap(
            ScopeKind::Model,
            "key:alice/opus",
            Meter::Usd,
            Period::Day,
            5_000_000,
        ),
        cap(ScopeKind::Key, "alice", Meter::Requests, Period::Minute, 60),
    ];
    assert_eq!(
        caps_arg(&caps).unwrap(),
        "model|key:alice/opus|usd|day|5000000|key|alice|requests|minute|60"
    );
    for id in ["a|b", ""] {
        let bad = [cap(ScopeKind::Key, id, Meter::Tokens, Period::Minute, 1)];
        assert!(matches!(caps_arg(&bad), Err(StoreError::Refused(_))));
    }
}

fn entry(id: &str, key: &str, org: Option<(&str, &str)>, actual: i64) -> StreamEntry {
    StreamEntry {
        id: id.to_owned(),
        exec_id: format!("exec-{id}"),
        key: key.to_owned(),
        org: org.map(|(org, _)| org.to_owned()),
        run: None,
        customer: None,
        model: "gpt-4o-mini".to_owned(),
        input_tokens: 1,
        cached_input_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 1,
        reserved: 10,
        actual,
        status: "ok".to_owned(),
        note: None,
        at_ms: 1,
        key_period: "2026-12-08".to_owned(),
        org_period: org.map(|(_, period)| period.to_owned()),
    }
}

/// `drain.lua`'s ARGV: through, limit, first, sums, each folded field
/// summed once in the order first seen, as `fold` sums them.
#[test]
fn a_drained_page_is_sent_with_its_sums_per_folded_field() {
    let acme = Some(("acme", "2026-12"));
    let page = [
        entry("1-0", "alice", acme, 100),
        entry("1-1", "bob", acme, -7),
        entry("2-0", "alice", acme, 5),
    ];
    assert_eq!(
        drain_args(&page),
        [
            "2-0",
            "3",
            "1-0",
            "key:alice:2026-12-08:f|105|org:acme:2026-12:f|98|key:bob:2026-12-08:f|-7",
        ]
    );
    assert_eq!(
        drain_args(&[entry("5-0", "carol", None, 3)])[3],
        "key:carol:2026-12-08:f|3"
    );
}

/// A page the script could not read sums of goes without them, and the
/// script folds its entries itself.
#[test]
fn a_page_without_readable_sums_is_left_to_the_script() {
    let mut no_period = entry("1-0", "alice", Some(("acme", "2026-12")), 1);
    no_period.org_period = None;
    let huge = entry("1-0", "alice", None, 1 << 53);
    let pages = [
        vec![entry("1-0", "al|ice", None, 1)],
        vec![entry("1-0", "alice", None, 1), no_period],
        vec![huge],
    ];
    for page in pages {
        let args = drain_args(&page);
        assert_eq!((args[2].as_str(), args[3].as_str()), ("", ""), "{page:?}");
        assert_eq!(args[1], page.len().to_string());
    }
}
