//! An inline image's width and height, read from the header bytes of its
//! base64 text without decoding the image.
//!
//! The providers price an image by its dimensions, so the estimate needs
//! them; decoding a picture would cost far more than the whole estimate.
//! PNG, GIF and WebP keep their size in the first 30 bytes; a JPEG keeps it
//! in a frame header after its metadata segments, which are skipped by
//! their lengths. The base64 text (the `base64` crate's standard alphabet)
//! is decoded only as far as the last byte read. Every character up to it
//! must be standard base64: a provider that drops stray characters would
//! otherwise see the header bytes at other offsets than the gateway read
//! them. Anything this module cannot read with certainty is `None`, and
//! the caller bounds the image by the largest size its model accepts.
//!
//! The headers are read here rather than by the `imagesize` crate because
//! a size here is an upper bound on what a provider will charge for, and
//! `imagesize` reads what a viewer shows: a JPEG's first frame header
//! (decoders differ on a file with several, so the largest of them counts
//! here), a GIF's logical screen (Pillow widens it to a first image that
//! reaches past it, and so does this module), and no 0xFF fill bytes
//! before a JPEG marker.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;

/// An image's pixel dimensions as its decoders report them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Size {
    pub width: u64,
    pub height: u64,
}

/// Segments and blocks a JPEG or GIF header may have before its size:
/// real files have a few dozen; past this the image counts as unread.
const MAX_STEPS: usize = 1024;

/// The size of the image in a `data:` URL carrying base64.
pub(super) fn from_data_url(url: &str) -> Option<Size> {
    let rest = url
        .get(..5)?
        .eq_ignore_ascii_case("data:")
        .then(|| &url[5..])?;
    let (header, data) = rest.split_once(',')?;
    let base64 = header.get(header.len().checked_sub(7)?..)?;
    if !base64.eq_ignore_ascii_case(";base64") {
        return None;
    }
    from_base64(data)
}

/// The size of the image whose bytes `data` holds as standard base64.
pub(super) fn from_base64(data: &str) -> Option<Size> {
    let mut bytes = Base64::new(data);
    let size = match bytes.array::<4>(0)? {
        [0x89, b'P', b'N', b'G'] => png(&mut bytes),
        [0xFF, 0xD8, 0xFF, _] => jpeg(&mut bytes),
        [b'G', b'I', b'F', b'8'] => gif(&mut bytes),
        [b'R', b'I', b'F', b'F'] => webp(&mut bytes),
        _ => None,
    }?;
    (size.width > 0 && size.height > 0).then_some(size)
}

/// PNG: the IHDR chunk, first after the signature, holds width and height.
fn png(bytes: &mut Base64) -> Option<Size> {
    if bytes.array::<8>(0)? != *b"\x89PNG\r\n\x1a\n" || bytes.array::<4>(12)? != *b"IHDR" {
        return None;
    }
    Some(Size {
        width: bytes.be32(16)?,
        height: bytes.be32(20)?,
    })
}

/// JPEG: the frame header (SOFn) after any metadata segments. Decoders
/// differ on a file with several frame headers (one refuses it, another
/// takes the last), so every one before the scan counts and the largest
/// width and height are taken.
fn jpeg(bytes: &mut Base64) -> Option<Size> {
    let mut at = 2;
    let mut size: Option<Size> = None;
    for _ in 0..MAX_STEPS {
        if bytes.byte(at)? != 0xFF {
            return None;
        }
        // A marker may be preceded by any number of 0xFF fill bytes.
        at += 1;
        let mut marker = bytes.byte(at)?;
        while marker == 0xFF {
            at += 1;
            marker = bytes.byte(at)?;
        }
        at += 1;
        match marker {
            // The start of the scan: the frame headers are all read.
            0xDA | 0xD9 => return size,
            // Markers without a length: TEM, RSTn, a repeated SOI.
            0x01 | 0xD0..=0xD8 => continue,
            _ => {}
        }
        let length = bytes.be16(at)?;
        if length < 2 {
            return None;
        }
        if is_frame_header(marker) {
            let (height, width) = (bytes.be16(at + 3)?, bytes.be16(at + 5)?);
            size = Some(match size {
                Some(seen) => Size {
                    width: seen.width.max(width),
                    height: seen.height.max(height),
                },
                None => Size { width, height },
            });
        }
        at += usize::try_from(length).ok()?;
    }
    None
}

/// SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC); DHP (DE) states a
/// hierarchical image's full size in the same layout.
fn is_frame_header(marker: u8) -> bool {
    matches!(marker, 0xC0..=0xCF | 0xDE) && !matches!(marker, 0xC4 | 0xC8 | 0xCC)
}

/// GIF: the logical screen, widened to the first image when it reaches past
/// the screen (as Pillow reads it).
fn gif(bytes: &mut Base64) -> Option<Size> {
    let version = bytes.array::<6>(0)?;
    if version != *b"GIF87a" && version != *b"GIF89a" {
        return None;
    }
    let (width, height) = (bytes.le16(6)?, bytes.le16(8)?);
    let flags = bytes.byte(10)?;
    let mut at = 13;
    if flags & 0x80 != 0 {
        // The global colour table: 3 bytes per entry, 2^(n+1) entries.
        at += 3 << ((flags & 0x07) + 1);
    }
    let mut steps = 0;
    loop {
        match bytes.byte(at)? {
            // An image descriptor: left, top, width, height.
            0x2C => {
                let right = bytes.le16(at + 1)? + bytes.le16(at + 5)?;
                let bottom = bytes.le16(at + 3)? + bytes.le16(at + 7)?;
                return Some(Size {
                    width: width.max(right),
                    height: height.max(bottom),
                });
            }
            // An extension: a label, then sub-blocks up to an empty one.
            0x21 => {
                at += 2;
                loop {
                    steps += 1;
                    if steps > MAX_STEPS {
                        return None;
                    }
                    let length = usize::from(bytes.byte(at)?);
                    at += 1 + length;
                    if length == 0 {
                        break;
                    }
                }
            }
            _ => return None,
        }
    }
}

/// WebP: the first chunk says how it is coded, and each coding keeps the
/// size in its own few bytes.
fn webp(bytes: &mut Base64) -> Option<Size> {
    if bytes.array::<4>(8)? != *b"WEBP" {
        return None;
    }
    match &bytes.array::<4>(12)? {
        b"VP8 " => {
            if bytes.array::<3>(23)? != [0x9D, 0x01, 0x2A] {
                return None;
            }
            Some(Size {
                width: bytes.le16(26)? & 0x3FFF,
                height: bytes.le16(28)? & 0x3FFF,
            })
        }
        b"VP8L" => {
            if bytes.byte(20)? != 0x2F {
                return None;
            }
            let bits = u64::from(u32::from_le_bytes(bytes.array::<4>(21)?));
            Some(Size {
                width: (bits & 0x3FFF) + 1,
                height: ((bits >> 14) & 0x3FFF) + 1,
            })
        }
        b"VP8X" => Some(Size {
            width: bytes.le24(24)? + 1,
            height: bytes.le24(27)? + 1,
        }),
        _ => None,
    }
}

// === impl Base64 ===

/// Standard base64, whose stray bits after a last byte are ignored rather
/// than refused, as decoders commonly do.
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// Random access to the bytes a base64 text encodes, decoded only as far
/// as the furthest byte asked for.
struct Base64<'a> {
    text: &'a [u8],
    /// The bytes of the text's first `quartets` quartets of characters.
    decoded: Vec<u8>,
    quartets: usize,
}

impl<'a> Base64<'a> {
    fn new(text: &'a str) -> Base64<'a> {
        Base64 {
            text: text.as_bytes(),
            decoded: Vec::new(),
            quartets: 0,
        }
    }

    /// The decoded byte at `index`, if every character up to it is
    /// standard base64.
    fn byte(&mut self, index: usize) -> Option<u8> {
        self.decode_to((index / 3).checked_add(1)?)?;
        self.decoded.get(index).copied()
    }

    fn array<const N: usize>(&mut self, index: usize) -> Option<[u8; N]> {
        let mut out = [0; N];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = self.byte(index + i)?;
        }
        Some(out)
    }

    fn be16(&mut self, index: usize) -> Option<u64> {
        Some(u64::from(u16::from_be_bytes(self.array(index)?)))
    }

    fn be32(&mut self, index: usize) -> Option<u64> {
        Some(u64::from(u32::from_be_bytes(self.array(index)?)))
    }

    fn le16(&mut self, index: usize) -> Option<u64> {
        Some(u64::from(u16::from_le_bytes(self.array(index)?)))
    }

    fn le24(&mut self, index: usize) -> Option<u64> {
        let [a, b, c] = self.array(index)?;
        Some(u64::from(u32::from_le_bytes([a, b, c, 0])))
    }

    /// Decodes the text's first `quartets` quartets, if they are whole and
    /// standard base64, with `=` only as the padding that ends the text.
    fn decode_to(&mut self, quartets: usize) -> Option<()> {
        if quartets <= self.quartets {
            return Some(());
        }
        let end = quartets.checked_mul(4)?;
        let more = self.text.get(self.quartets * 4..end)?;
        // The engine sees only the start of the text and would take
        // padding at its end for the end of the text.
        if end < self.text.len() && more.contains(&b'=') {
            return None;
        }
        let before = self.decoded.len();
        if STANDARD.decode_vec(more, &mut self.decoded).is_err() {
            self.decoded.truncate(before);
            return None;
        }
        self.quartets = quartets;
        Some(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Standard base64 with padding, for building test images.
    pub(in crate::estimate) fn encode(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A PNG signature and IHDR chunk (the CRC is not checked).
    pub(in crate::estimate) fn png(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        bytes.extend(width.to_be_bytes());
        bytes.extend(height.to_be_bytes());
        bytes.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        bytes.extend([0; 64]);
        bytes
    }

    /// A JPEG with an APP1 segment of `metadata` bytes before its frame.
    fn jpeg(width: u16, height: u16, metadata: usize) -> Vec<u8> {
        let mut bytes = vec![0xFF, 0xD8, 0xFF, 0xE1];
        bytes.extend(u16::try_from(metadata + 2).unwrap().to_be_bytes());
        bytes.extend(std::iter::repeat_n(0xAB, metadata));
        bytes.extend([0xFF, 0xFF, 0xC2, 0x00, 0x11, 0x08]);
        bytes.extend(height.to_be_bytes());
        bytes.extend(width.to_be_bytes());
        bytes.extend([3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        bytes.extend([0xFF, 0xDA, 0x00, 0x02, 0x12, 0x34]);
        bytes
    }

    fn size(width: u64, height: u64) -> Option<Size> {
        Some(Size { width, height })
    }

    #[test]
    fn decodes_the_bytes_asked_for() {
        let data: Vec<u8> = (0..=255).collect();
        let text = encode(&data);
        let mut bytes = Base64::new(&text);
        assert_eq!(bytes.byte(0), Some(0));
        assert_eq!(bytes.byte(200), Some(200));
        assert_eq!(bytes.byte(255), Some(255));
        assert_eq!(bytes.byte(256), None, "past the padding");
        assert_eq!(bytes.array::<3>(100), Some([100, 101, 102]));
    }

    #[test]
    fn padding_only_ends_the_text_and_a_short_tail_is_unread() {
        assert_eq!(Base64::new("AA==").byte(0), Some(0));
        assert_eq!(Base64::new("AA==AAAA").byte(0), None);
        // Stray bits after the last byte are ignored.
        assert_eq!(Base64::new("AB==").byte(0), Some(0));
        // Missing padding: the whole quartets before it still read.
        let mut unpadded = Base64::new("AAAAAA");
        assert_eq!(unpadded.byte(2), Some(0));
        assert_eq!(unpadded.byte(3), None);
        let png = encode(&png(64, 64));
        assert_eq!(from_base64(png.trim_end_matches('=')), size(64, 64));
    }

    #[test]
    fn reads_png_sizes() {
        assert_eq!(from_base64(&encode(&png(1024, 768))), size(1024, 768));
        let url = format!("data:image/png;base64,{}", encode(&png(1, 40_000)));
        assert_eq!(from_data_url(&url), size(1, 40_000));
        assert_eq!(from_base64(&encode(&png(0, 768))), None);
    }

    #[test]
    fn reads_jpeg_sizes_past_their_metadata() {
        assert_eq!(from_base64(&encode(&jpeg(4032, 3024, 0))), size(4032, 3024));
        let exif = encode(&jpeg(4032, 3024, 60_000));
        assert_eq!(from_base64(&exif), size(4032, 3024));
        // A frame header hidden after a second one: the larger sizes win.
        let mut two = jpeg(100, 100, 10);
        let at = two.len() - 6;
        two.splice(
            at..at,
            [
                0xFF, 0xC0, 0, 0x0B, 8, 0x01, 0x00, 0x20, 0x00, 1, 1, 0x11, 0,
            ],
        );
        assert_eq!(from_base64(&encode(&two)), size(8192, 256));
        // A stray character before the frame header: unread.
        let mut text = exif.clone();
        text.insert(40_000, '\n');
        assert_eq!(from_base64(&text), None);
        // No frame header before the scan.
        assert_eq!(
            from_base64(&encode(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 2, 0, 0])),
            None
        );
    }

    #[test]
    fn reads_gif_and_webp_sizes() {
        let mut gif = b"GIF89a".to_vec();
        gif.extend([0x40, 0x01, 0xF0, 0x00, 0x80, 0, 0]); // 320x240, 2-colour table
        gif.extend([0; 6]);
        gif.extend([0x21, 0xF9, 0x04, 0, 0, 0, 0, 0]);
        gif.extend([0x2C, 0, 0, 0, 0, 0x40, 0x01, 0x00, 0x02, 0]); // 320x512 frame
        assert_eq!(from_base64(&encode(&gif)), size(320, 512));

        let webp = |chunk: &[u8; 4], body: &[u8]| {
            let mut bytes = b"RIFF\x00\x00\x00\x00WEBP".to_vec();
            bytes.extend(chunk);
            bytes.extend([0, 0, 0, 0]);
            bytes.extend(body);
            bytes.extend([0; 16]);
            encode(&bytes)
        };
        let lossy = webp(
            b"VP8 ",
            &[0, 0, 0, 0x9D, 0x01, 0x2A, 0x80, 0x07, 0x38, 0x04],
        );
        assert_eq!(from_base64(&lossy), size(1920, 1080));
        // 14 bits each of width - 1 and height - 1.
        let bits: u32 = 1919 | (1079 << 14);
        let mut lossless = vec![0x2F];
        lossless.extend(bits.to_le_bytes());
        assert_eq!(from_base64(&webp(b"VP8L", &lossless)), size(1920, 1080));
        let extended = webp(b"VP8X", &[0, 0, 0, 0, 0x7F, 0x07, 0, 0x37, 0x04, 0]);
        assert_eq!(from_base64(&extended), size(1920, 1080));
    }

    #[test]
    fn anything_else_is_unread() {
        let png = encode(&png(64, 64));
        for unread in [
            "data:image/png,%89PNG".to_owned(),
            format!("data:image/png;base64;x,{png}"),
            format!("https://example.com/a.png?{png}"),
            "data:image/png;base64,".to_owned(),
            format!("data:image/png;base64,{}", encode(b"<svg></svg>")),
            format!("data:image/png;base64,{}", png.replace('A', "-")),
            format!("data:image/png;base64, {png}"),
        ] {
            assert_eq!(from_data_url(&unread), None, "{unread}");
        }
        // The media type need not match: the bytes say what the image is.
        assert_eq!(
            from_data_url(&format!("DATA:image/webp;BASE64,{png}")),
            size(64, 64)
        );
    }
}
