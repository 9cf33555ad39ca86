//! What one image or document can cost in input tokens, by each
//! provider's published formula, rounded up and taken at the dearest model
//! the gateway may forward to (it reserves before it knows more than the
//! model's name, and a newer model of the same name family may see more
//! pixels).
//!
//! Sources (the providers' vision and PDF pages, as of 2026):
//! - Anthropic, "Images and vision": an image costs about
//!   `width * height / 750` tokens; newer text of the page counts 28x28
//!   pixel patches, `ceil(w/28) * ceil(h/28)`, after padding to a multiple
//!   of 28. An image above the model's native resolution is first scaled
//!   down, aspect kept. That resolution was 1568 px on the long edge and
//!   about 1.15 MP (~1,600 tokens) up to Claude 4.6; Opus 4.7 reads up to
//!   2576 px and about 3.75 MP. So the bound here is the larger of the two
//!   formulas, after scaling to the larger resolution: at most
//!   [`CLAUDE_IMAGE_MAX`].
//! - Anthropic, "PDF support": each page is converted to an image and its
//!   text is extracted beside it; at most 100 pages a request. A page is
//!   reserved at [`CLAUDE_IMAGE_MAX`] plus [`PAGE_TEXT`].
//! - OpenAI, "Images and vision" (calculating costs): *tile* models
//!   (GPT-4o, 4.1, 4.5, GPT-5 and o-series at their own, lower, base and
//!   tile counts) fit the image in 2048x2048, then scale its shortest side
//!   down to 768, and bill 85 tokens plus 170 per 512 px tile (`detail:
//!   low`: 85). *Patch* models (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/
//!   nano) count 32x32 patches up to a budget of 1536 (scaled down to fit)
//!   and multiply by up to 2.46 (nano). `detail: "original"` (which Codex
//!   sends for `view_image` on models that support it) keeps up to about
//!   10.24 MP: 10,000 patches. The bound is the larger of the tile and the
//!   patch count at the dearest multiplier. (gpt-4o-mini's 2833 + 5667 per
//!   tile is left out: it only makes its price per image match 4o's, and it
//!   is no model Codex runs.)

use super::header::Dimensions;

/// Anthropic's largest native image resolution: long edge, pixels.
pub const CLAUDE_LONG_EDGE: u64 = 2576;
pub const CLAUDE_PIXELS: u64 = 2576 * 1456;

/// The most one image can cost at Anthropic: `CLAUDE_PIXELS / 750`
/// (5,001) with room for the rounding up of a scaled size and for
/// padding to 28 px. An image the gateway cannot read is reserved at this.
pub const CLAUDE_IMAGE_MAX: u64 = 5_120;

/// A PDF page's extracted text, at most (Anthropic's PDF page puts a
/// page's text at 1,500 to 3,000 tokens; the larger end is taken, for a
/// dense page).
pub const PAGE_TEXT: u64 = 3_000;

/// Tokens of one image at Anthropic.
pub fn claude_image(d: Dimensions) -> u64 {
    let (w, h) = fit(d, CLAUDE_LONG_EDGE, CLAUDE_PIXELS);
    let by_area = (w * h).div_ceil(750);
    let by_patch = w.div_ceil(28) * h.div_ceil(28);
    by_area.max(by_patch).min(CLAUDE_IMAGE_MAX)
}

/// Tokens of a PDF of `pages` pages at Anthropic (`None`: uncounted, the
/// provider's maximum).
pub fn claude_document(pages: Option<u64>) -> u64 {
    per_pages(pages, CLAUDE_IMAGE_MAX + PAGE_TEXT)
}

/// The `detail` an OpenAI input image asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    Low,
    /// `high`, `auto` or none.
    High,
    /// `original`, or a value this gateway does not know (priced as the
    /// largest).
    Original,
}

impl Detail {
    pub fn of(detail: Option<&str>) -> Detail {
        match detail {
            Some("low") => Detail::Low,
            None | Some("high" | "auto") => Detail::High,
            Some(_) => Detail::Original,
        }
    }
}

const TILE_BASE: u64 = 85;
const TILE: u64 = 170;
/// The dearest patch multiplier, as a percentage (gpt-4.1-nano, 2.46).
const PATCH_PERCENT: u64 = 246;
const PATCH_BUDGET: u64 = 1_536;
const PATCH_BUDGET_ORIGINAL: u64 = 10_000;

/// Tokens of one image at OpenAI (`None`: unreadable, the most an image
/// of that `detail` can cost).
pub fn openai_image(d: Option<Dimensions>, detail: Detail) -> u64 {
    let tiles = match (detail, d) {
        (Detail::Low, _) => TILE_BASE,
        (_, Some(d)) => {
            let (w, h) = fit(d, 2048, u64::MAX);
            // Then the shortest side down to 768 (never up).
            let (w, h) = scaled(w, h, 768.0 / w.min(h) as f64);
            TILE_BASE + TILE * w.div_ceil(512) * h.div_ceil(512)
        }
        // 2048 x 768 at most: 4 x 2 tiles.
        (_, None) => TILE_BASE + TILE * 8,
    };
    let budget = if detail == Detail::Original {
        PATCH_BUDGET_ORIGINAL
    } else {
        PATCH_BUDGET
    };
    let patches = d.map_or(budget, |d| {
        (u64::from(d.width).div_ceil(32) * u64::from(d.height).div_ceil(32)).min(budget)
    });
    tiles.max((patches * PATCH_PERCENT).div_ceil(100))
}

/// The most one OpenAI image of `high` detail costs: a PDF page's image.
pub fn openai_page_image() -> u64 {
    openai_image(None, Detail::High)
}

/// Tokens of an input file at OpenAI: a PDF's pages, each an image and
/// its text (`None`: uncounted, or not a PDF: the maximum).
pub fn openai_file(pages: Option<u64>) -> u64 {
    per_pages(pages, openai_page_image() + PAGE_TEXT)
}

fn per_pages(pages: Option<u64>, per_page: u64) -> u64 {
    pages
        .unwrap_or(super::pdf::MAX_PAGES)
        .max(1)
        .saturating_mul(per_page)
}

/// `d` scaled down (aspect kept) until its long edge is at most
/// `long_edge` and its area at most `pixels`; each side rounded up, so
/// the area is never under what the provider's own rounding gives.
fn fit(d: Dimensions, long_edge: u64, pixels: u64) -> (u64, u64) {
    let (w, h) = (u64::from(d.width), u64::from(d.height));
    let by_edge = long_edge as f64 / w.max(h) as f64;
    let by_area = (pixels as f64 / (w as f64 * h as f64)).sqrt();
    scaled(w, h, by_edge.min(by_area))
}

/// `w` x `h` times `s` when `s` shrinks it, each side rounded up (and
/// never grown by the rounding).
fn scaled(w: u64, h: u64, s: f64) -> (u64, u64) {
    if s >= 1.0 || s.is_nan() {
        return (w, h);
    }
    let scale = |x: u64| ((x as f64 * s).ceil() as u64).clamp(1, x);
    (scale(w), scale(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(width: u32, height: u32) -> Dimensions {
        Dimensions { width, height }
    }

    #[test]
    fn claude_images_by_their_pixels() {
        // 1x1: one patch. 200x200: 54 by area (the docs' "~54"), 64 by
        // patches (8 x 8).
        assert_eq!(claude_image(d(1, 1)), 1);
        assert_eq!(claude_image(d(200, 200)), 64);
        // 1568x1568 is within the larger native resolution: not scaled.
        // 2,458,624 / 750 = 3278.2; patches 56 x 56 = 3136.
        assert_eq!(claude_image(d(1568, 1568)), 3279);
        // 4000x3000 is scaled to ~3.75 MP (2237x1678 rounded up).
        let big = claude_image(d(4000, 3000));
        assert!((5000..=CLAUDE_IMAGE_MAX).contains(&big), "{big}");
        // Never above the per-image maximum, whatever the shape.
        for (w, h) in [
            (8000, 8000),
            (u32::MAX, u32::MAX),
            (u32::MAX, 1),
            (2576, 1456),
            (1936, 1936),
        ] {
            assert!(claude_image(d(w, h)) <= CLAUDE_IMAGE_MAX, "{w}x{h}");
        }
        // Always at least the old (1568 px, 1.15 MP) formula's count.
        for (w, h) in [(1092, 1092), (1000, 1000), (800, 600), (1568, 784)] {
            let old = (u64::from(w) * u64::from(h)).div_ceil(750);
            assert!(claude_image(d(w, h)) >= old, "{w}x{h}");
        }
    }

    #[test]
    fn claude_documents_by_their_pages() {
        assert_eq!(claude_document(Some(1)), CLAUDE_IMAGE_MAX + PAGE_TEXT);
        assert_eq!(claude_document(Some(0)), CLAUDE_IMAGE_MAX + PAGE_TEXT);
        assert_eq!(claude_document(None), 100 * (CLAUDE_IMAGE_MAX + PAGE_TEXT));
        assert_eq!(claude_document(Some(u64::MAX)), u64::MAX);
    }

    #[test]
    fn openai_images_by_tiles_or_patches() {
        // Low detail: 85 by tiles, but a patch model counts patches.
        assert_eq!(openai_image(Some(d(100, 100)), Detail::Low), 85);
        // The docs' examples (tiles): 1024x1024 -> 768x768, 4 tiles: 765;
        // 2048x4096 -> 1024x2048 -> 768x1536, 6 tiles: 1105. The patch
        // count at 2.46 is larger for both: 1024 * 2.46 and 1536 * 2.46.
        assert_eq!(openai_image(Some(d(1024, 1024)), Detail::High), 2520);
        assert_eq!(openai_image(Some(d(2048, 4096)), Detail::High), 3779);
        // A small image: 1 tile (255) against 4 patches (10).
        assert_eq!(openai_image(Some(d(64, 64)), Detail::High), 255);
        assert_eq!(openai_image(Some(d(1, 1)), Detail::High), 255);
        // Unreadable: the largest of each detail.
        assert_eq!(openai_image(None, Detail::Low), 3779);
        assert_eq!(openai_image(None, Detail::High), 3779);
        assert_eq!(openai_image(None, Detail::Original), 24_600);
        // Original detail keeps more patches.
        assert_eq!(openai_image(Some(d(3200, 3200)), Detail::Original), 24_600);
        assert_eq!(openai_image(Some(d(3200, 3200)), Detail::High), 3779);
        assert_eq!(Detail::of(Some("auto")), Detail::High);
        assert_eq!(Detail::of(None), Detail::High);
        assert_eq!(Detail::of(Some("ultra")), Detail::Original);
    }

    #[test]
    fn openai_tiles_follow_the_documented_steps() {
        // With no patch model the bound would be the tile count; check the
        // tile arithmetic through shapes whose patch count is small.
        // 4096x8 -> 2048x4: 4 tiles x 1 = 85 + 680 = 765 (patches: 128).
        assert_eq!(openai_image(Some(d(4096, 8)), Detail::High), 765);
        // 2048x768 after scaling: 4 x 2 tiles.
        let t = openai_image(Some(d(8192, 3072)), Detail::High);
        assert!(t >= 85 + 170 * 8, "{t}");
    }

    #[test]
    fn openai_files_by_their_pages() {
        assert_eq!(openai_file(Some(2)), 2 * (3779 + PAGE_TEXT));
        assert_eq!(openai_file(None), 100 * (3779 + PAGE_TEXT));
    }
}
