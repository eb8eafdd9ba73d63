//! OpenAI's tokenizers, for counting only.
//!
//! [`Tokenizer::count`] returns exactly the length of what tiktoken's
//! `encode_ordinary` returns, in a fraction of its time and memory:
//!
//! - the vocabulary stays in the binary as one table of token bytes
//!   (written by `build.rs` from tiktoken-rs), found through a hash table
//!   of ranks ([`vocab`]);
//! - text is cut into pieces by tiktoken's own patterns on a DFA-based
//!   regex engine, with the one look-ahead they use done by hand
//!   ([`pieces`]);
//! - a piece that is not itself a token is merged the way tiktoken merges
//!   it, counting the parts instead of collecting ranks ([`merge`]).
//!
//! tiktoken-rs is the reference (`build.rs` takes the vocabularies from
//! it, and the tests check every count against it) but not what counts:
//! it runs its split pattern on a backtracking regex engine and keeps
//! several copies of each vocabulary, and counting was then most of the
//! gateway's work per call. This counts the same at about a tenth of the
//! time and memory (`cargo bench --bench micro -- token_count`;
//! docs/performance.md), and needs only a count, never the token ids.
//!
//! A long text's count is remembered by its content ([`cache`]), so the
//! conversation an agent resends every turn is counted once.

pub mod cache;
mod merge;
mod pieces;
mod vocab;

use std::sync::OnceLock;

use cache::CountCache;
use pieces::Splitter;
use vocab::Vocab;

static O200K_TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.bin"));
static CL100K_TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.bin"));

/// tiktoken's o200k_base split pattern, one alternative per entry.
const O200K_PATTERNS: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    pieces::TRAILING_SPACE,
];

/// tiktoken's cl100k_base split pattern, one alternative per entry.
const CL100K_PATTERNS: &[&str] = &[
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)",
    r"[^\r\n\p{L}\p{N}]?\p{L}+",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    pieces::TRAILING_SPACE,
];

/// A byte-pair encoding that counts tokens.
pub struct Tokenizer {
    /// Its own id in the count cache.
    id: u8,
    vocab: Vocab,
    splitter: Splitter,
}

impl Tokenizer {
    /// The tokenizer of GPT-4o and OpenAI's later models, built on first use
    /// (a few milliseconds); `None` only if its tables are corrupt.
    pub fn o200k_base() -> Option<&'static Tokenizer> {
        static TOKENIZER: OnceLock<Option<Tokenizer>> = OnceLock::new();
        TOKENIZER
            .get_or_init(|| Tokenizer::build(1, "o200k_base", O200K_TABLE, O200K_PATTERNS))
            .as_ref()
    }

    /// The tokenizer of GPT-4, GPT-3.5 and OpenAI's embedding models.
    pub fn cl100k_base() -> Option<&'static Tokenizer> {
        static TOKENIZER: OnceLock<Option<Tokenizer>> = OnceLock::new();
        TOKENIZER
            .get_or_init(|| Tokenizer::build(2, "cl100k_base", CL100K_TABLE, CL100K_PATTERNS))
            .as_ref()
    }

    fn build(id: u8, name: &str, table: &'static [u8], patterns: &[&str]) -> Option<Tokenizer> {
        let built = Vocab::new(table).and_then(|vocab| {
            let splitter = Splitter::new(patterns)?;
            Ok(Tokenizer {
                id,
                vocab,
                splitter,
            })
        });
        match built {
            Ok(tokenizer) => Some(tokenizer),
            Err(error) => {
                tracing::error!(%error, tokenizer = name, "tokenizer unavailable");
                None
            }
        }
    }

    /// The number of tokens `text` encodes to, remembered for the next
    /// time the same text comes ([`cache`]).
    pub fn count(&self, text: &str) -> u64 {
        self.count_in(CountCache::global(), text)
    }

    /// [`Tokenizer::count`] with the counts remembered in `cache`.
    pub fn count_in(&self, cache: &CountCache, text: &str) -> u64 {
        cache.count(self.id, text, |text| self.count_afresh(text))
    }

    /// The summed count of `texts`, remembered in `cache` one by one and
    /// as a sequence (see [`CountCache::count_all`]).
    pub fn count_all_in(&self, cache: &CountCache, texts: &[&str]) -> u64 {
        cache.count_all(self.id, texts, |text| self.count_afresh(text))
    }

    /// The number of tokens `text` encodes to, counted now.
    pub fn count_afresh(&self, text: &str) -> u64 {
        let mut scratch = merge::Scratch::default();
        self.splitter
            .pieces(text)
            .map(|piece| {
                let piece = piece.as_bytes();
                if piece.len() == 1 || self.vocab.rank(piece).is_some() {
                    1
                } else {
                    merge::count(&self.vocab, piece, &mut scratch)
                }
            })
            .sum()
    }
}

#[cfg(test)]
mod tests;
