//! Cuts text into the pieces a byte-pair encoding merges within.
//!
//! tiktoken's split patterns end in `\s+(?!\S)|\s+`: a run of whitespace
//! followed by more text leaves its last character to start the next
//! piece (so " world" stays one token). Look-ahead needs a backtracking
//! engine, which costs most of tiktoken's time; here the patterns run on
//! `regex-automata`'s lazy DFA as separate alternatives, in order, and a
//! run matched by the final `\s+` gives its last character back by hand.
//! Every character starts a match of some alternative, so the pieces tile
//! the text and each search is anchored where the last piece ended.

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};

/// The last alternative of every pattern list, standing for tiktoken's
/// `\s+(?!\S)|\s+`.
pub(super) const TRAILING_SPACE: &str = r"\s+";

pub(super) struct Splitter {
    regex: Regex,
}

impl Splitter {
    /// `patterns` are the alternatives in order, [`TRAILING_SPACE`] last.
    pub(super) fn new(patterns: &[&str]) -> Result<Splitter, String> {
        if patterns.last() != Some(&TRAILING_SPACE) {
            return Err("split patterns must end with the trailing-space pattern".into());
        }
        let regex = Regex::new_many(patterns).map_err(|error| error.to_string())?;
        Ok(Splitter { regex })
    }

    pub(super) fn pieces<'t>(&'t self, text: &'t str) -> Pieces<'t> {
        Pieces {
            splitter: self,
            text,
            at: 0,
        }
    }
}

pub(super) struct Pieces<'t> {
    splitter: &'t Splitter,
    text: &'t str,
    at: usize,
}

impl<'t> Iterator for Pieces<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        let (text, start) = (self.text, self.at);
        if start >= text.len() {
            return None;
        }
        let input = Input::new(text).range(start..).anchored(Anchored::Yes);
        let end = match self.splitter.regex.search_half(&input) {
            Some(found) if found.offset() > start => {
                let end = found.offset();
                let last_pattern = self.splitter.regex.pattern_len() - 1;
                if found.pattern().as_usize() == last_pattern && end < text.len() {
                    // `\s+(?!\S)`: a run of two or more characters before
                    // more text keeps its last one for the next piece.
                    let run = &text[start..end];
                    match run.char_indices().next_back() {
                        Some((last, _)) if last > 0 => start + last,
                        _ => end,
                    }
                } else {
                    end
                }
            }
            // Unreachable with tiktoken's patterns, which match at every
            // character; one character is then a piece of its own.
            _ => start + text[start..].chars().next().map_or(1, char::len_utf8),
        };
        self.at = end;
        Some(&text[start..end])
    }
}
