use super::*;

/// A `streamGenerateContent` answer as the Gemini API sends it without
/// `alt=sse`: pretty-printed elements, `\r\n` before each comma.
const STREAM: &[u8] = br#"[{
  "candidates": [
    {
      "content": {
        "parts": [
          {
            "text": "The quick brown fox {jumps} over \"the\" lazy dog"
          }
        ],
        "role": "model"
      },
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 8,
    "totalTokenCount": 8,
    "promptTokensDetails": [
      {
        "modality": "TEXT",
        "tokenCount": 8
      }
    ]
  },
  "modelVersion": "gemini-2.0-flash",
  "responseId": "mDkgaJCbL4mz1dkP0IfUkAw"
}
,
{
  "candidates": [
    {
      "content": {
        "parts": [
          {
            "text": ". Back\\slash \\\"}\" and \u007d\u0022 then \ud83d\ude00 done.\n"
          }
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 8,
    "candidatesTokenCount": 25,
    "totalTokenCount": 33,
    "promptTokensDetails": [
      {
        "modality": "TEXT",
        "tokenCount": 8
      }
    ],
    "candidatesTokensDetails": [
      {
        "modality": "TEXT",
        "tokenCount": 25
      }
    ]
  },
  "modelVersion": "gemini-2.0-flash",
  "responseId": "mDkgaJCbL4mz1dkP0IfUkAw"
}
]"#;

/// Feeds `pieces` in order and collects every element, then the rest.
fn split<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Bytes>, Bytes) {
    let mut splitter = JsonArraySplitter::new();
    let mut elements = Vec::new();
    for piece in pieces {
        splitter.push(piece);
        while let Some(element) = splitter.next_element() {
            elements.push(element);
        }
    }
    (elements, splitter.take_rest())
}

fn concat(elements: &[Bytes], rest: &[u8]) -> Vec<u8> {
    let mut all: Vec<u8> = elements.iter().flat_map(|e| e.iter().copied()).collect();
    all.extend_from_slice(rest);
    all
}

/// A small deterministic generator (xorshift64*), so the random split
/// points are the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % bound.max(1)
    }
}

/// Splitting at every byte position, into single bytes and at random
/// points yields the same pieces as one push, and they reassemble the input.
fn assert_split_invariant(input: &[u8]) -> (Vec<Bytes>, Bytes) {
    let (whole, whole_rest) = split([input]);
    assert_eq!(concat(&whole, &whole_rest), input);
    for at in 0..=input.len() {
        let (head, tail) = input.split_at(at);
        assert_eq!(
            split([head, tail]),
            (whole.clone(), whole_rest.clone()),
            "split at {at}"
        );
    }
    assert_eq!(
        split(input.chunks(1)),
        (whole.clone(), whole_rest.clone()),
        "bytes"
    );
    for seed in 1..=50u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut pieces = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let (piece, tail) = rest.split_at(rng.below(rest.len().min(40)) + 1);
            pieces.push(piece);
            rest = tail;
        }
        assert_eq!(
            split(pieces),
            (whole.clone(), whole_rest.clone()),
            "seed {seed}"
        );
    }
    (whole, whole_rest)
}

#[test]
fn recorded_stream_splits_identically_at_every_byte() {
    let (elements, rest) = assert_split_invariant(STREAM);
    assert_eq!(elements.len(), 2);
    assert!(elements[0].starts_with(b"[{"));
    assert!(elements[1].starts_with(b"\n,\n{"));
    assert_eq!(rest.as_ref(), b"\n]");
    for element in &elements {
        let json = element_json(element);
        assert!(json.starts_with(b"{") && json.ends_with(b"}"));
        let value: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert!(value["usageMetadata"]["promptTokenCount"].is_u64());
    }
    let last: serde_json::Value = serde_json::from_slice(element_json(&elements[1])).unwrap();
    assert_eq!(
        last["candidates"][0]["content"]["parts"][0]["text"],
        ". Back\\slash \\\"}\" and }\" then 😀 done.\n"
    );
}

#[test]
fn crlf_and_compact_framing_split_alike() {
    let crlf: Vec<u8> = STREAM
        .iter()
        .flat_map(|b| {
            if *b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![*b]
            }
        })
        .collect();
    let (elements, rest) = assert_split_invariant(&crlf);
    assert_eq!(elements.len(), 2);
    assert!(elements[1].starts_with(b"\r\n,\r\n{"));
    assert_eq!(rest.as_ref(), b"\r\n]");

    let compact: &[u8] = br#"[{"a":{"b":[{"c":"}"}]}},{"d":"{{"} , {}]"#;
    let (elements, rest) = assert_split_invariant(compact);
    let raw: Vec<&[u8]> = elements.iter().map(|e| e.as_ref()).collect();
    assert_eq!(
        raw,
        [
            &br#"[{"a":{"b":[{"c":"}"}]}}"#[..],
            br#",{"d":"{{"}"#,
            b" , {}"
        ]
    );
    assert_eq!(rest.as_ref(), b"]");
    let json: Vec<&[u8]> = raw.iter().map(|r| element_json(r)).collect();
    assert_eq!(
        json,
        [&br#"{"a":{"b":[{"c":"}"}]}}"#[..], br#"{"d":"{{"}"#, b"{}"]
    );
}

#[test]
fn escapes_inside_strings_never_end_them() {
    // An escaped quote, an escaped backslash before a real quote, and
    // braces written as unicode escapes.
    let input: &[u8] =
        br#"[{"t":"a\"}"},{"t":"b\\"},{"t":"\\\"}{"},{"t":"\u007b\u007d\\u0022"},{"\"}":"}"}]"#;
    let (elements, rest) = assert_split_invariant(input);
    let json: Vec<&[u8]> = elements.iter().map(|e| element_json(e)).collect();
    assert_eq!(
        json,
        [
            &br#"{"t":"a\"}"}"#[..],
            br#"{"t":"b\\"}"#,
            br#"{"t":"\\\"}{"}"#,
            br#"{"t":"\u007b\u007d\\u0022"}"#,
            br#"{"\"}":"}"}"#,
        ]
    );
    for json in json {
        serde_json::from_slice::<serde_json::Value>(json).unwrap();
    }
    assert_eq!(rest.as_ref(), b"]");
}

#[test]
fn empty_array_is_all_rest() {
    for input in [&b"[]"[..], b"[\n]", b" [ ] ", b""] {
        let (elements, rest) = assert_split_invariant(input);
        assert!(elements.is_empty());
        assert_eq!(rest.as_ref(), input);
    }
}

#[test]
fn a_cut_stream_leaves_its_partial_element() {
    let cut = &STREAM[..STREAM.len() / 2 + 200];
    let (elements, rest) = assert_split_invariant(cut);
    assert_eq!(elements.len(), 1);
    assert!(rest.starts_with(b"\n,\n{"));
    assert_eq!(concat(&elements, &rest), cut);

    // Cut inside a string with an open escape: the state is dropped with
    // the rest, and the splitter starts afresh.
    let mut splitter = JsonArraySplitter::new();
    splitter.push(br#"[{"t":"ab\"#);
    assert_eq!(splitter.next_element(), None);
    assert_eq!(splitter.take_rest().as_ref(), br#"[{"t":"ab\"#);
    assert_eq!(splitter.buffered(), 0);
    splitter.push(br#"{"t":"}"}"#);
    assert_eq!(
        splitter.next_element().as_deref(),
        Some(&br#"{"t":"}"}"#[..])
    );
}

#[test]
fn malformed_streams_just_yield_pieces() {
    let inputs: [&[u8]; 8] = [
        b"}}]{\"a\":1}",
        b"[1, 2, \"{\", null]",
        b"[\"}\", {\"a\":\"b\"}]",
        b"{\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\"}}",
        b"\"unterminated {",
        b"{{{{",
        b"\xff\xfe{\xc3}\x00]",
        b"<html>502 Bad Gateway</html>",
    ];
    for input in inputs {
        assert_split_invariant(input);
    }
    let (elements, rest) = split([&b"}}]{\"a\":1}"[..]]);
    assert_eq!(elements[0].as_ref(), b"}}]{\"a\":1}");
    assert_eq!(element_json(&elements[0]), b"}}]{\"a\":1}");
    assert!(rest.is_empty());
    let (elements, _) = split([&b"[\"}\", {\"a\":\"b\"}]"[..]]);
    assert_eq!(elements[0].as_ref(), b"[\"}\", {\"a\":\"b\"}");
}

#[test]
fn a_huge_element_sent_a_byte_at_a_time_is_scanned_once() {
    // Decoded, each `x\"{}` is the four characters `x"{}`.
    let text = "x\\\"{}".repeat(100_000);
    let input =
        format!("[{{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{text}\"}}]}}}}]}}\n]");
    let mut splitter = JsonArraySplitter::new();
    let mut elements = Vec::new();
    for byte in input.as_bytes().chunks(1) {
        splitter.push(byte);
        // The scan always stands at the end of what arrived: no byte is
        // looked at twice.
        match splitter.next_element() {
            Some(element) => elements.push(element),
            None => assert_eq!(splitter.scanned, splitter.buffered()),
        }
    }
    assert_eq!(elements.len(), 1);
    assert_eq!(splitter.take_rest().as_ref(), b"\n]");
    let value: serde_json::Value = serde_json::from_slice(element_json(&elements[0])).unwrap();
    assert_eq!(
        value["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .len(),
        400_000
    );
}

#[test]
fn element_json_trims_only_framing() {
    assert_eq!(element_json(b"[{}"), b"{}");
    assert_eq!(element_json(b"\r\n,\r\n {\"a\":1}"), b"{\"a\":1}");
    assert_eq!(element_json(b"\xEF\xBB\xBF[\n{}"), b"{}");
    assert_eq!(element_json(b"\n]"), b"]");
    assert_eq!(element_json(b", ,"), b"");
    assert_eq!(element_json(b""), b"");
}
