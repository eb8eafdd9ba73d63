//! The forwarded body as the client's own bytes with the gateway's changes
//! spliced in: an agent's request is mostly a long conversation the gateway
//! never changes, and serialising the parsed body again would cost more
//! than everything else the gateway does with it.
//!
//! The gateway changes only a few top-level members (an output limit, the
//! stream options, a tool use limit, a config object holding the limit).
//! Each member it touched is written anew from the parsed body: in place of
//! the client's when the client sent one, appended when not, left out when
//! the gateway removed it. Every other byte is the
//! client's, so what the provider parses is exactly the parsed body the
//! gateway checked and priced, whitespace and escapes aside.
//!
//! Finding the members is one pass over the bytes that jumps from quote to
//! quote inside strings (`memchr`), where a conversation's bytes are. The
//! result is parts, not a copy: the client's bytes as slices of the buffer
//! they came in, the members written anew between them.

use std::ops::Range;

use bytes::Bytes;
use memchr::memchr2;
use serde_json::{Map, Value};

/// Where one top-level member of an object lies in its bytes.
#[derive(Debug, PartialEq, Eq)]
struct Member {
    /// The key, unescaped.
    key: String,
    /// The member's first byte (the key's opening quote) and the byte
    /// after its value.
    start: usize,
    end: usize,
    /// Where its value begins.
    value_start: usize,
}

/// `original` (one JSON object, as parsed into `body`) with each member
/// named in `touched` written as `body` has it now, as the parts to send
/// in order; `None` if the bytes are not the object they were parsed as,
/// when the caller serialises the whole body instead.
pub(super) fn splice(
    original: &Bytes,
    body: &Map<String, Value>,
    touched: &[String],
) -> Option<Vec<Bytes>> {
    let (members, close) = members(original)?;
    let is_touched = |key: &String| touched.contains(key);
    let mut out = Parts::new(original);
    // The opening brace and the space after it.
    out.keep(0..members.first().map_or(close, |first| first.start));
    let mut kept = 0usize;
    // The end of the last member written as the client wrote it, whose
    // separator to the next one is the client's too.
    let mut previous_end: Option<usize> = None;
    for (i, member) in members.iter().enumerate() {
        let value = if is_touched(&member.key) {
            match body.get(&member.key) {
                Some(value) => Some(serde_json::to_vec(value).ok()?),
                None => continue,
            }
        } else {
            None
        };
        match previous_end {
            Some(end) if i > 0 && members[i - 1].end == end => out.keep(end..member.start),
            _ if kept > 0 => out.write(b","),
            _ => {}
        }
        match value {
            Some(value) => {
                out.keep(member.start..member.value_start);
                out.write(&value);
            }
            None => out.keep(member.start..member.end),
        }
        previous_end = Some(member.end);
        kept += 1;
    }
    for key in touched {
        if members.iter().any(|member| &member.key == key) {
            continue;
        }
        if let Some(value) = body.get(key) {
            if kept > 0 {
                out.write(b",");
            }
            out.write(&serde_json::to_vec(key).ok()?);
            out.write(b":");
            out.write(&serde_json::to_vec(value).ok()?);
            kept += 1;
        }
    }
    // The closing brace and what follows.
    out.keep(close..original.len());
    Some(out.finish())
}

/// The parts of a spliced body as they are built: runs of the client's
/// bytes kept as one slice each, what is written between them gathered
/// in one small buffer.
struct Parts<'a> {
    original: &'a Bytes,
    parts: Vec<Bytes>,
    /// The client's bytes kept since the last part, not yet a part.
    kept: Option<Range<usize>>,
    written: Vec<u8>,
}

impl<'a> Parts<'a> {
    fn new(original: &'a Bytes) -> Parts<'a> {
        Parts {
            original,
            parts: Vec::new(),
            kept: None,
            written: Vec::new(),
        }
    }

    /// Keeps `range` of the client's bytes, joined to the range kept just
    /// before when they touch.
    fn keep(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.flush_written();
        match &mut self.kept {
            Some(kept) if kept.end == range.start => kept.end = range.end,
            _ => {
                self.flush_kept();
                self.kept = Some(range);
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.flush_kept();
        self.written.extend_from_slice(bytes);
    }

    fn flush_kept(&mut self) {
        if let Some(range) = self.kept.take() {
            self.parts.push(self.original.slice(range));
        }
    }

    fn flush_written(&mut self) {
        if !self.written.is_empty() {
            self.parts
                .push(Bytes::from(std::mem::take(&mut self.written)));
        }
    }

    fn finish(mut self) -> Vec<Bytes> {
        self.flush_kept();
        self.flush_written();
        self.parts
    }
}

/// The top-level members of the object in `bytes`, and where its closing
/// brace is; `None` if `bytes` is not one JSON object.
fn members(bytes: &[u8]) -> Option<(Vec<Member>, usize)> {
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(bytes, at + 1);
    let mut members = Vec::new();
    if bytes.get(at) == Some(&b'}') {
        return Some((members, at));
    }
    loop {
        let start = at;
        let key_end = string_end(bytes, at)?;
        let raw_key = &bytes[start..key_end];
        let key = if raw_key.contains(&b'\\') {
            serde_json::from_slice(raw_key).ok()?
        } else {
            std::str::from_utf8(&raw_key[1..raw_key.len() - 1])
                .ok()?
                .to_owned()
        };
        at = skip_space(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        let value_start = skip_space(bytes, at + 1);
        let end = value_end(bytes, value_start)?;
        members.push(Member {
            key,
            start,
            end,
            value_start,
        });
        at = skip_space(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            Some(b'}') => return Some((members, at)),
            _ => return None,
        }
    }
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The byte after the string whose opening quote is at `at`.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    loop {
        at += memchr2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes[at] == b'\\' {
            at += 2;
        } else {
            return Some(at + 1);
        }
    }
}

/// The byte after the value that begins at `at`.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = at;
            loop {
                match bytes.get(at)? {
                    b'"' => {
                        at = string_end(bytes, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            // A number, true, false or null: up to the next delimiter.
            let length = bytes[at..].iter().position(|byte| {
                matches!(byte, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            })?;
            Some(at + length)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn joined(parts: Vec<Bytes>) -> Vec<u8> {
        parts.concat()
    }

    /// Parses `text`, applies `change` to the parsed body, and splices
    /// the members it names: the result must parse to the changed body.
    fn spliced(
        text: &str,
        touched: &[&str],
        change: impl FnOnce(&mut Map<String, Value>),
    ) -> String {
        let mut body: Map<String, Value> = serde_json::from_str(text).unwrap();
        change(&mut body);
        let touched: Vec<String> = touched.iter().map(|key| (*key).to_owned()).collect();
        let out = joined(
            splice(&Bytes::copy_from_slice(text.as_bytes()), &body, &touched).expect("spliced"),
        );
        let reparsed: Map<String, Value> = serde_json::from_slice(&out).unwrap();
        assert_eq!(reparsed, body, "{}", String::from_utf8_lossy(&out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replaces_appends_and_removes_members_keeping_every_other_byte() {
        let text = "{ \"model\" : \"gpt-4o\",\n  \"messages\": [{\"role\": \"user\", \"content\": \"a \\\"quoted\\\" }{ text \\\\\"}],\n  \"max_tokens\": 10 ,\"stream\":true }";
        // Replaced in place.
        let out = spliced(text, &["max_tokens"], |body| {
            body.insert("max_tokens".into(), json!(4));
        });
        assert!(out.contains("\"max_tokens\": 4 ,"), "{out}");
        assert!(out.contains("a \\\"quoted\\\" }{ text \\\\"), "{out}");
        // Appended.
        let out = spliced(text, &["stream_options"], |body| {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        });
        assert!(
            out.ends_with("\"stream\":true,\"stream_options\":{\"include_usage\":true}}"),
            "{out}"
        );
        // Removed: in the middle, and last.
        let out = spliced(text, &["max_tokens", "max_completion_tokens"], |body| {
            body.remove("max_tokens");
            body.insert("max_completion_tokens".into(), json!(7));
        });
        assert!(!out.contains("max_tokens"), "{out}");
        spliced(text, &["stream"], |body| {
            body.remove("stream");
        });
        spliced(text, &["model"], |body| {
            body.remove("model");
        });
        // Every member at once.
        spliced(
            text,
            &["model", "messages", "max_tokens", "stream", "n"],
            |body| {
                body.remove("model");
                body.remove("stream");
                body.insert("messages".into(), json!([]));
                body.insert("n".into(), json!(2));
            },
        );
    }

    #[test]
    fn nested_objects_escaped_keys_and_empty_objects() {
        let text = r#"{"contents":[{"parts":[{"text":"]]}}"}]}],"generationConfig":{"temperature":0.5},"max\u005ftokens":3}"#;
        let out = spliced(text, &["generationConfig"], |body| {
            body["generationConfig"]["maxOutputTokens"] = json!(100);
        });
        assert!(out.contains(r#"{"text":"]]}}"}"#), "{out}");
        // A key the client escaped is still found.
        spliced(text, &["max_tokens"], |body| {
            body.insert("max_tokens".into(), json!(9));
        });
        spliced("{}", &["max_tokens"], |body| {
            body.insert("max_tokens".into(), json!(9));
        });
        spliced(" { } ", &["a", "b"], |body| {
            body.insert("a".into(), json!(1));
            body.insert("b".into(), json!("x"));
        });
        spliced(r#"{"only":1}"#, &["only"], |body| {
            body.remove("only");
        });
        // Every member removed, one added.
        spliced(r#"{"a":1,"b":2}"#, &["b", "a", "c"], |body| {
            body.remove("a");
            body.remove("b");
            body.insert("c".into(), json!(3));
        });
        // Neighbours removed together.
        spliced(r#"{"a":1,"b":2,"c":3,"d":4}"#, &["b", "c"], |body| {
            body.remove("b");
            body.remove("c");
        });
    }

    /// Objects of random members, spacing and escapes, and random sets of
    /// members set, changed and removed: every splice reads back as the
    /// changed body.
    #[test]
    fn any_change_to_any_object_reads_back_as_the_changed_body() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let values = [
            "1",
            "-2.5e3",
            "true",
            "null",
            "\"x\"",
            "\"a\\\"}]\"",
            "[]",
            "{}",
            "[1, {\"k\": [\"]\"]}]",
            "{\"n\":{\"m\":\"{\"}}",
        ];
        let keys = ["a", "b", "max_tokens", "stream_options", "k\\u0065y", "z"];
        let spaces = ["", " ", "\n  ", "\t"];
        for _ in 0..2_000 {
            let count = next(keys.len() as u64 + 1) as usize;
            let mut text = format!("{}{{", spaces[next(4) as usize]);
            for (i, key) in keys.iter().take(count).enumerate() {
                if i > 0 {
                    text.push(',');
                }
                let value = values[next(values.len() as u64) as usize];
                let (s1, s2, s3) = (
                    spaces[next(4) as usize],
                    spaces[next(4) as usize],
                    spaces[next(4) as usize],
                );
                text.push_str(&format!("{s1}\"{key}\"{s2}:{s3}{value}"));
            }
            text.push_str(&format!("{}}}", spaces[next(4) as usize]));
            let mut body: Map<String, Value> = serde_json::from_str(&text).unwrap();
            let mut touched = Vec::new();
            for key in ["a", "b", "max_tokens", "stream_options", "key", "new"] {
                match next(4) {
                    0 => {
                        body.remove(key);
                        touched.push(key.to_owned());
                    }
                    1 => {
                        body.insert(
                            key.to_owned(),
                            json!({"include_usage": true, "n": next(100)}),
                        );
                        touched.push(key.to_owned());
                    }
                    _ => {}
                }
            }
            let out = joined(splice(&Bytes::from(text.clone()), &body, &touched).expect(&text));
            let reread: Map<String, Value> = serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("{e}: {text} -> {}", String::from_utf8_lossy(&out)));
            assert_eq!(reread, body, "{text}");
        }
    }

    #[test]
    fn bytes_that_are_not_one_object_are_left_to_the_serialiser() {
        let body = Map::new();
        let touched = vec!["a".to_owned()];
        for text in ["[]", "{\"a\":1", "{\"a\" 1}", "{\"a\":\"x}", ""] {
            assert_eq!(splice(&Bytes::from(text), &body, &touched), None, "{text}");
        }
    }
}
