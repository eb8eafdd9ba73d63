//! The most input tokens an image in a request can cost, by the provider's
//! own rule for the model.
//!
//! The providers bill an image as input tokens computed from its pixel
//! size, the detail the request asks for and the model: from a few tokens
//! for a thumbnail to 48,169 for a large image on gpt-4o-mini. A flat
//! allowance either reserves far too much or lets a call pass its cap, so
//! each image part is bounded here by the rule its model documents, read
//! from what the request says: the detail level, and the size in the header
//! of an inline (base64) image. Where the request does not say (a remote
//! URL, an uploaded file, an unreadable header, `auto` detail), the bound is
//! the rule's most expensive case; for a model the table does not know, it
//! is the most expensive of every rule in it.
//!
//! Sources: OpenAI's "Images and vision" guide ("Calculating costs", "Model
//! sizing behavior"); Anthropic's "Vision" guide ("Evaluate image size",
//! "How Claude resizes and pads images").

use serde_json::{Map, Value};

use super::image_size::{self, Size};

/// Content parts that carry an image: OpenAI chat (`image_url`), Responses
/// (`input_image`, a computer-use `computer_screenshot`), Anthropic (`image`).
pub(super) const IMAGE_TYPES: &[&str] =
    &["image_url", "input_image", "image", "computer_screenshot"];

/// How a model turns one image into input tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ImageRule {
    /// OpenAI's tile rule: `low` detail costs `base`; otherwise the image is
    /// fit in 2048x2048, its short side cut to 768 px, and each 512 px tile
    /// costs `tile` more.
    Tiles { base: u64, tile: u64 },
    /// OpenAI's patch rule: one 32x32 patch per token, the image shrunk to
    /// fit a patch budget (`high` for `high` and `low` detail, `largest`
    /// for `original` and `auto`), times the model's multiplier in
    /// hundredths.
    Patches {
        high: u64,
        largest: u64,
        per_100: u64,
    },
    /// Anthropic's rule: one 28x28 patch per token, the image shrunk to fit
    /// the model's visual token `budget` (the detail level does not apply).
    Claude { budget: u64 },
    /// A model the table does not know: the dearest rule of the table.
    Unknown,
}

use ImageRule::{Claude, Patches, Tiles};

const fn tiles(base: u64, tile: u64) -> ImageRule {
    Tiles { base, tile }
}

const fn patches(budget: u64, per_100: u64) -> ImageRule {
    Patches {
        high: budget,
        largest: budget,
        per_100,
    }
}

/// OpenAI's "gpt-5.4 and future models": 2,500 patches at `high`, up to
/// `largest` at `original` (10,000; 30,000 on GPT-5.6, where `auto` means
/// `original` and a larger image is refused rather than shrunk), times 1.2.
const fn original(largest: u64) -> ImageRule {
    Patches {
        high: 2_500,
        largest,
        per_100: 120,
    }
}

/// Model name → rule; `name*` matches any name starting with `name`, and
/// `name` matches itself and its snapshots (`-2024-08-06`, `-20250514`,
/// `-latest`, `@…`). A fine-tuned model (`ft:base:…`) follows its base.
const RULES: &[(&str, ImageRule)] = &[
    // OpenAI, tile rule: base and tile tokens from the guide's table.
    ("gpt-4o", tiles(85, 170)),
    ("chatgpt-4o", tiles(85, 170)),
    ("gpt-4.1", tiles(85, 170)),
    ("gpt-4.5-preview", tiles(85, 170)),
    ("gpt-4-turbo", tiles(85, 170)), // in the guide's earlier editions
    ("gpt-4o-mini", tiles(2_833, 5_667)),
    ("gpt-5", tiles(70, 140)),
    ("gpt-5-chat", tiles(70, 140)),
    ("o1", tiles(75, 150)),
    ("o1-pro", tiles(75, 150)),
    ("o3", tiles(75, 150)),
    ("computer-use-preview", tiles(65, 129)),
    // OpenAI, patch rule with a 1,536-patch budget; the guide's multipliers.
    ("gpt-4.1-mini", patches(1_536, 162)),
    ("gpt-4.1-nano", patches(1_536, 246)),
    ("o4-mini", patches(1_536, 172)),
    ("gpt-5-mini", patches(1_536, 162)),
    ("gpt-5-nano", patches(1_536, 246)),
    ("gpt-5.4-mini", patches(1_536, 162)),
    ("gpt-5.4-nano", patches(1_536, 246)),
    // The guide lists their 1,536-patch budget but no multiplier; their
    // bills show 1.2, the multiplier of OpenAI's larger GPT-5 models.
    ("gpt-5.2", patches(1_536, 120)),
    ("gpt-5.2-chat", patches(1_536, 120)),
    ("gpt-5.2-codex", patches(1_536, 120)),
    ("gpt-5.3-codex", patches(1_536, 120)),
    // OpenAI, patch rule with an `original` detail level.
    ("gpt-5.4", original(10_000)),
    ("gpt-5.5", original(10_000)),
    ("gpt-5.6", original(30_000)),
    ("gpt-5.6-sol", original(30_000)),
    ("gpt-5.6-terra", original(30_000)),
    ("gpt-5.6-luna", original(30_000)),
    // Anthropic: 1,568 tokens before Claude Opus 4.7, 4,784 from it on.
    ("claude-3-haiku", Claude { budget: 1_568 }),
    ("claude-3-sonnet", Claude { budget: 1_568 }),
    ("claude-3-opus", Claude { budget: 1_568 }),
    ("claude-3-5-haiku", Claude { budget: 1_568 }),
    ("claude-3-5-sonnet", Claude { budget: 1_568 }),
    ("claude-3-7-sonnet", Claude { budget: 1_568 }),
    ("claude-opus-4", Claude { budget: 1_568 }),
    ("claude-sonnet-4", Claude { budget: 1_568 }),
    ("claude-opus-4-0", Claude { budget: 1_568 }),
    ("claude-sonnet-4-0", Claude { budget: 1_568 }),
    ("claude-opus-4-1", Claude { budget: 1_568 }),
    ("claude-opus-4-5", Claude { budget: 1_568 }),
    ("claude-sonnet-4-5", Claude { budget: 1_568 }),
    ("claude-haiku-4-5", Claude { budget: 1_568 }),
    ("claude-opus-4-6", Claude { budget: 1_568 }),
    ("claude-sonnet-4-6", Claude { budget: 1_568 }),
    // Claude Opus 4.7 "and later models": any other Claude.
    ("claude-*", Claude { budget: 4_784 }),
];

/// The rule `model` prices images by.
pub(super) fn rule_for(model: &str) -> ImageRule {
    let base = match model.strip_prefix("ft:") {
        Some(tuned) => tuned.split(':').next().unwrap_or(tuned),
        None => model,
    };
    RULES
        .iter()
        .find(|(name, _)| names(name, base))
        .map_or(ImageRule::Unknown, |&(_, rule)| rule)
}

/// Whether table entry `name` covers `model`.
fn names(name: &str, model: &str) -> bool {
    if let Some(prefix) = name.strip_suffix('*') {
        return model.starts_with(prefix);
    }
    let Some(rest) = model.strip_prefix(name) else {
        return false;
    };
    if rest.is_empty() || rest == "-latest" || rest.starts_with('@') {
        return true;
    }
    rest.strip_prefix('-').is_some_and(is_date)
}

/// `20250514` or `2024-08-06`.
fn is_date(text: &str) -> bool {
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    match text.split('-').collect::<Vec<_>>().as_slice() {
        [compact] => compact.len() == 8 && digits(compact),
        [year, month, day] => [(year, 4), (month, 2), (day, 2)]
            .iter()
            .all(|(part, len)| part.len() == *len && digits(part)),
        _ => false,
    }
}

/// The detail level a part asks for, as far as the bound cares, cheapest
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Detail {
    Low,
    High,
    /// `auto` (the model chooses), `original`, absent or unknown: the
    /// rule's largest.
    Largest,
}

/// The most input tokens the image part `part` can cost under `rule`.
pub(super) fn part_tokens(rule: ImageRule, part: &Map<String, Value>) -> u64 {
    rule.tokens(detail(part), size(part))
}

/// The part's `detail` (chat nests it in `image_url`); where it is given
/// twice, the dearer.
fn detail(part: &Map<String, Value>) -> Detail {
    let inner = part.get("image_url").and_then(Value::as_object);
    [Some(part), inner]
        .into_iter()
        .flatten()
        .filter_map(|fields| fields.get("detail"))
        .map(|detail| match detail.as_str() {
            Some("low") => Detail::Low,
            Some("high") => Detail::High,
            _ => Detail::Largest,
        })
        .max()
        .unwrap_or(Detail::Largest)
}

/// The image's size, when its bytes are in the request.
fn size(part: &Map<String, Value>) -> Option<Size> {
    // A file id, or a second image, may take the place of the inline bytes
    // upstream.
    let [file, url, source] = ["file_id", "image_url", "source"].map(|key| part.contains_key(key));
    if file || (url && source) {
        return None;
    }
    match part.get("image_url") {
        Some(Value::String(url)) => return image_size::from_data_url(url),
        Some(Value::Object(inner)) if inner.contains_key("file_id") => return None,
        Some(Value::Object(inner)) => {
            return image_size::from_data_url(inner.get("url")?.as_str()?);
        }
        _ => {}
    }
    let source = part.get("source")?.as_object()?;
    match source.get("type")?.as_str()? {
        "base64" => image_size::from_base64(source.get("data")?.as_str()?),
        // A URL or a file the provider reads itself.
        _ => None,
    }
}

// === impl ImageRule ===

/// OpenAI's tile rule: the largest image after scaling is 2048 x 768.
const MAX_TILES: u64 = 4 * 2;
/// Anthropic's older statement of its rule: about width x height / 750.
const LEGACY_PIXELS_PER_TOKEN: u64 = 750;
const CLAUDE_PATCH: u64 = 28;
const OPENAI_PATCH: u64 = 32;

impl ImageRule {
    /// The most input tokens one image costs at `detail` and, when known,
    /// `size`.
    fn tokens(self, detail: Detail, size: Option<Size>) -> u64 {
        match self {
            Tiles { base, .. } if detail == Detail::Low => base,
            Tiles { base, tile } => base.saturating_add(tile.saturating_mul(tile_count(size))),
            Patches {
                high,
                largest,
                per_100,
            } => {
                // `low` is bounded as `high`: on the 1,536-patch models
                // it bills the same.
                let budget = if detail == Detail::Largest {
                    largest
                } else {
                    high
                };
                let patches = size.map_or(budget, |size| patch_count(size, OPENAI_PATCH));
                patches.min(budget).saturating_mul(per_100).div_ceil(100)
            }
            Claude { budget } => {
                // The guide's exact rule: whole 28 px patches, up to the
                // budget. Its earlier wording, width x height / 750 up to
                // the same area, is a little dearer for most images; the
                // bound holds under both.
                let patches = size.map_or(budget, |size| patch_count(size, CLAUDE_PATCH));
                let area_cap = budget * CLAUDE_PATCH * CLAUDE_PATCH;
                let area = size.map_or(area_cap, |size| size.width.saturating_mul(size.height));
                let legacy = area.min(area_cap).div_ceil(LEGACY_PIXELS_PER_TOKEN);
                patches.min(budget).max(legacy)
            }
            ImageRule::Unknown => RULES
                .iter()
                .map(|&(_, rule)| rule.tokens(detail, size))
                .max()
                .unwrap_or(0),
        }
    }
}

/// Patches of `side` pixels that cover an image.
fn patch_count(size: Size, side: u64) -> u64 {
    size.width
        .div_ceil(side)
        .saturating_mul(size.height.div_ceil(side))
}

/// 512 px tiles after OpenAI's scaling: fit in 2048x2048, then the short
/// side down to 768. The guide does not say how a scaled side is rounded,
/// so each is taken at whichever rounding costs more.
fn tile_count(size: Option<Size>) -> u64 {
    let Some(size) = size else {
        return MAX_TILES;
    };
    let (long, short) = (size.width.max(size.height), size.width.min(size.height));
    let (long, short_low, short_high) = if long > 2048 {
        (2048, short * 2048 / long, (short * 2048).div_ceil(long))
    } else {
        (long, short, short)
    };
    let long = if short_low > 768 {
        (long * 768).div_ceil(short_low)
    } else {
        long
    };
    let short = short_high.min(768);
    long.div_ceil(512) * short.div_ceil(512)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::image_size::tests::{encode, png};
    use serde_json::json;

    fn size(width: u64, height: u64) -> Option<Size> {
        Some(Size { width, height })
    }

    fn tokens(model: &str, detail: Detail, size: Option<Size>) -> u64 {
        rule_for(model).tokens(detail, size)
    }

    #[test]
    fn tile_models_match_the_guides_examples() {
        use Detail::*;
        // gpt-4o: 1024x1024 high is 4 tiles, 2048x4096 high is 6, low is flat.
        assert_eq!(tokens("gpt-4o", High, size(1024, 1024)), 765);
        assert_eq!(tokens("gpt-4o-2024-08-06", High, size(2048, 4096)), 1_105);
        assert_eq!(tokens("gpt-4o", Low, size(4096, 8192)), 85);
        assert_eq!(tokens("gpt-4o-mini", Low, None), 2_833);
        assert_eq!(tokens("gpt-5", High, size(1024, 1024)), 70 + 4 * 140);
        assert_eq!(tokens("o3", High, size(512, 512)), 75 + 150);
        // Unknown size or `auto`: the largest scaled image, 2048x768.
        assert_eq!(tokens("gpt-4o", Largest, None), 85 + 8 * 170);
        assert_eq!(tokens("gpt-4o-mini", High, None), 2_833 + 8 * 5_667);
        // A short side that scales to 512.75 px may be rounded up.
        assert_eq!(tile_count(size(2049, 513)), 8);
        assert_eq!(tile_count(size(100_000, 1)), 4);
    }

    #[test]
    fn patch_models_match_the_guides_examples() {
        use Detail::*;
        // 1024x1024 is 1,024 patches, under the budget.
        assert_eq!(tokens("gpt-4.1-mini", High, size(1024, 1024)), 1_659); // 1024 x 1.62
        assert_eq!(tokens("gpt-4.1-nano", Low, size(1024, 1024)), 2_520); // 1024 x 2.46
                                                                          // 1800x2400 needs 4,275 patches and is shrunk: the guide's
                                                                          // arithmetic lands on 1,452, billing has been seen at the budget.
        assert_eq!(tokens("o4-mini", High, size(1800, 2400)), 2_642); // 1536 x 1.72
        assert_eq!(tokens("gpt-5-mini", High, None), 2_489); // 1536 x 1.62
                                                             // The larger budget applies to `original` and `auto` only.
        assert_eq!(tokens("gpt-5.4", High, size(4000, 3000)), 3_000);
        assert_eq!(tokens("gpt-5.4", Largest, size(4000, 3000)), 12_000);
        assert_eq!(tokens("gpt-5.4", Largest, size(1024, 1024)), 1_229);
        assert_eq!(tokens("gpt-5.6-sol", Largest, None), 36_000);
    }

    #[test]
    fn claude_matches_the_guides_examples() {
        use Detail::*;
        // Sonnet: 200x200 is 64 patches (about 54 by the area rule),
        // 1000x1000 1,296 (about 1,334), 1092x1092 1,521 (about 1,590).
        assert_eq!(tokens("claude-sonnet-4-5", High, size(200, 200)), 64);
        assert_eq!(tokens("claude-sonnet-4-5", Low, size(1000, 1000)), 1_334);
        assert_eq!(
            tokens("claude-3-5-haiku-20241022", High, size(1092, 1092)),
            1_590
        );
        // Shrunk to the budget: 1920x1080 bills 1,560 after the resize.
        assert_eq!(
            tokens("claude-opus-4-20250514", High, size(1920, 1080)),
            1_640
        );
        assert_eq!(tokens("claude-haiku-4-5", High, None), 1_640);
        // Opus 4.7 and later: 1920x1080 is 2,691 patches, 4K is shrunk to 4,784.
        assert_eq!(tokens("claude-opus-4-7", High, size(1920, 1080)), 2_765);
        assert!(tokens("claude-opus-4-7", High, size(2000, 1500)) >= 3_888);
        assert_eq!(tokens("claude-opus-4-7", High, size(3840, 2160)), 5_001);
        assert_eq!(tokens("claude-sonnet-5", High, None), 5_001);
    }

    #[test]
    fn models_resolve_by_name_and_snapshot() {
        assert_eq!(rule_for("gpt-4o-mini-2024-07-18"), rule_for("gpt-4o-mini"));
        assert_ne!(rule_for("gpt-4o-mini"), rule_for("gpt-4o"));
        assert_eq!(rule_for("gpt-4.1-mini-2025-04-14"), patches(1_536, 162));
        assert_eq!(rule_for("chatgpt-4o-latest"), rule_for("gpt-4o"));
        assert_eq!(rule_for("gpt-5-chat-latest"), rule_for("gpt-5"));
        assert_eq!(
            rule_for("ft:gpt-4o-2024-08-06:acme::abc123"),
            rule_for("gpt-4o")
        );
        assert_eq!(
            rule_for("claude-3-7-sonnet-latest"),
            Claude { budget: 1_568 }
        );
        assert_eq!(
            rule_for("claude-opus-4-1@20250805"),
            Claude { budget: 1_568 }
        );
        // A later Claude is not an older one's snapshot.
        assert_eq!(rule_for("claude-opus-4-7"), Claude { budget: 4_784 });
        assert_eq!(rule_for("claude-opus-4-10"), Claude { budget: 4_784 });
        for unknown in [
            "gpt-5.1",
            "gpt-4o-audio-preview",
            "gpt-5-pro",
            "llava",
            "o3-pro",
        ] {
            assert_eq!(rule_for(unknown), ImageRule::Unknown, "{unknown}");
        }
    }

    #[test]
    fn an_unknown_model_gets_the_dearest_rule() {
        use Detail::*;
        let unknown = ImageRule::Unknown;
        assert_eq!(unknown.tokens(High, None), 2_833 + 8 * 5_667);
        // Low detail: the 4,784-token Claude rule is dearer than any base.
        assert_eq!(unknown.tokens(Low, None), 5_001);
        // A large image at `original`: GPT-5.6's 30,000 patches x 1.2.
        assert_eq!(unknown.tokens(Largest, size(6000, 5000)), 35_420);
        for (model, _) in RULES {
            let model = model.trim_end_matches('*');
            for detail in [Low, High, Largest] {
                for size in [None, size(64, 64), size(1920, 1080), size(8000, 8000)] {
                    assert!(
                        unknown.tokens(detail, size) >= tokens(model, detail, size),
                        "{model} {detail:?} {size:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn reads_detail_and_size_from_each_api_shape() {
        let url = format!("data:image/png;base64,{}", encode(&png(1024, 1024)));
        let part = |value: Value| value.as_object().unwrap().clone();
        let rule = rule_for("gpt-4o");
        let chat = part(json!({"type": "image_url", "image_url": {"url": url, "detail": "high"}}));
        assert_eq!(part_tokens(rule, &chat), 765);
        let low = part(json!({"type": "image_url", "image_url": {"url": url, "detail": "low"}}));
        assert_eq!(part_tokens(rule, &low), 85);
        let responses = part(json!({"type": "input_image", "image_url": url, "detail": "auto"}));
        assert_eq!(part_tokens(rule, &responses), 765);
        // A remote URL or a file: the size is unknown.
        let remote = part(json!({"type": "input_image", "image_url": "https://x.test/a.png"}));
        assert_eq!(part_tokens(rule, &remote), 85 + 8 * 170);
        let file = part(json!({"type": "input_image", "image_url": url, "file_id": "file-1"}));
        assert_eq!(part_tokens(rule, &file), 85 + 8 * 170);
        // `detail` given twice: the dearer one.
        let twice = part(json!({"type": "image_url", "detail": "low",
            "image_url": {"url": url, "detail": "high"}}));
        assert_eq!(part_tokens(rule, &twice), 765);

        let claude = rule_for("claude-sonnet-4-5");
        let data = encode(&png(200, 200));
        let base64 = part(json!({"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": data}}));
        assert_eq!(part_tokens(claude, &base64), 64);
        let remote = part(
            json!({"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}),
        );
        assert_eq!(part_tokens(claude, &remote), 1_640);
    }
}
