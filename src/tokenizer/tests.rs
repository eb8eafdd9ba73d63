//! Every count is checked against tiktoken-rs, the reference.

use super::*;
use tiktoken_rs::CoreBPE;

fn both() -> [(&'static Tokenizer, &'static CoreBPE); 2] {
    [
        (
            Tokenizer::o200k_base().unwrap(),
            tiktoken_rs::o200k_base_singleton(),
        ),
        (
            Tokenizer::cl100k_base().unwrap(),
            tiktoken_rs::cl100k_base_singleton(),
        ),
    ]
}

fn assert_same(text: &str) {
    for (ours, reference) in both() {
        assert_eq!(
            ours.count_afresh(text),
            reference.encode_ordinary(text).len() as u64,
            "{text:?}"
        );
    }
}

/// A small deterministic generator, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Fragments chosen to meet every alternative of both split patterns and
/// the edges between them: every kind of whitespace and line break,
/// contractions in both cases, letters of every case class and script,
/// combining marks, digits of several scripts, symbols and emoji.
const FRAGMENTS: &[&str] = &[
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    " \n ",
    "\u{a0}",
    "\u{3000}",
    "\u{2003}",
    "\u{85}",
    "\u{2028}",
    "\u{b}",
    "\u{c}",
    "'s",
    "'S",
    "'ll",
    "'LL",
    "'re",
    "'ve",
    "'m",
    "'d",
    "'t",
    "'x",
    "hello",
    "World",
    "HTTP",
    "McDonald",
    "iPhone",
    "ǅemal",
    "ʰ",
    "日本語",
    "テキスト",
    "한국어",
    "Привет",
    "مرحبا",
    "e\u{301}",
    "\u{301}",
    "x\u{20dd}",
    "1",
    "12",
    "123",
    "1234567",
    "٣٤٥",
    "Ⅻ",
    "½",
    ".",
    ",",
    "!!",
    "...",
    "/",
    "//",
    "-->",
    "{\"a\": 1}",
    "€",
    "😀",
    "👍🏽",
    "\u{200d}",
    "_",
    "__init__",
    "$",
    "#",
    "'",
    "\"",
];

#[test]
fn counts_what_tiktoken_counts_on_mixed_text() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..4_000 {
        let mut text = String::new();
        for _ in 0..1 + rng.below(12) {
            text.push_str(FRAGMENTS[rng.below(FRAGMENTS.len())]);
        }
        assert_same(&text);
    }
}

#[test]
fn counts_what_tiktoken_counts_on_prose_code_and_markup() {
    let sources = [
        include_str!("../../README.md"),
        include_str!("../estimate.rs"),
        include_str!("../estimate/input.rs"),
        include_str!("../../lua/reserve.lua"),
        include_str!("../../config/prices.toml"),
    ];
    for source in sources {
        assert_same(source);
        for paragraph in source.split("\n\n") {
            assert_same(paragraph);
        }
    }
    assert_same("");
    assert_same("a");
    assert_same("  trailing  ");
    assert_same("\n\n\n   \n\t\t  x");
}

#[test]
fn counts_long_pieces_exactly() {
    for text in [
        "a".repeat(1_000),
        "ab".repeat(700),
        "abcdefghijklmnopqrstuvwxyz".repeat(40),
        " ".repeat(3_000),
        "=".repeat(1_000),
        format!("x{}", " ".repeat(500)),
        "supercalifragilisticexpialidocious".repeat(30),
        "日本語".repeat(200),
        "\u{301}".repeat(300),
    ] {
        assert_same(&text);
    }
}

#[test]
fn both_merge_loops_agree_on_every_piece() {
    let text = [
        include_str!("../../README.md"),
        &"abcdefghijklmnopqrstuvwxyz".repeat(10),
        &"zyxwvutsrqponm".repeat(12),
        &"ababbabaaabbb".repeat(15),
    ]
    .concat();
    for (ours, _) in both() {
        for piece in ours.splitter.pieces(&text) {
            if piece.len() > 1 {
                let (short, long) = merge::count_both(&ours.vocab, piece.as_bytes());
                assert_eq!(short, long, "{piece:?}");
            }
        }
    }
}
