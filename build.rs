//! Writes the vocabularies of OpenAI's o200k_base and cl100k_base
//! tokenizers as compact tables for `src/tokenizer`, taken from
//! tiktoken-rs, the reference the counts are checked against.
//!
//! A table is `n` (u32), then `n + 1` offsets (u32) into the token bytes,
//! then the bytes of every token in rank order, all little-endian. The
//! binary keeps it as it is; the tokenizer reads it in place.

use std::error::Error;
use std::path::Path;

use tiktoken_rs::CoreBPE;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    let out = std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?;
    let out = Path::new(&out);
    // The ordinary tokens' ranks run from 0 without gaps; the special
    // tokens above them are never produced from text.
    write_table(
        &tiktoken_rs::o200k_base()?,
        199_998,
        &out.join("o200k_base.bin"),
    )?;
    write_table(
        &tiktoken_rs::cl100k_base()?,
        100_256,
        &out.join("cl100k_base.bin"),
    )?;
    Ok(())
}

fn write_table(bpe: &CoreBPE, tokens: u32, path: &Path) -> Result<(), Box<dyn Error>> {
    let mut offsets = Vec::with_capacity(tokens as usize + 1);
    let mut bytes = Vec::new();
    for token in bpe._decode_native_and_split((0..tokens).collect()) {
        offsets.push(u32::try_from(bytes.len())?);
        bytes.extend_from_slice(&token);
    }
    offsets.push(u32::try_from(bytes.len())?);
    let mut table = Vec::with_capacity(4 + 4 * offsets.len() + bytes.len());
    table.extend_from_slice(&tokens.to_le_bytes());
    for offset in offsets {
        table.extend_from_slice(&offset.to_le_bytes());
    }
    table.extend_from_slice(&bytes);
    std::fs::write(path, table)?;
    Ok(())
}
