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
