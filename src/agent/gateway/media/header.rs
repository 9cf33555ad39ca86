//! An image's pixel dimensions, read from its header only: PNG, JPEG, GIF
//! and WebP, the formats both providers accept.
//!
//! The providers bill an image by its pixels, not its bytes, and the
//! pixels are declared in the first bytes of the file — so a header is all
//! the gateway decodes. Every reader takes bytes an agent process wrote and
//! may see them truncated (only a prefix is decoded): each answers `None`
//! rather than guess, and never panics (every index is checked).

/// An image's size in pixels, both at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dimensions {
    pub width: u32,
    pub height: u32,
}

impl Dimensions {
    fn new(width: u32, height: u32) -> Option<Dimensions> {
        (width > 0 && height > 0).then_some(Dimensions { width, height })
    }
}

/// The dimensions declared by an image's header, when it is one of the
/// four formats and its header is whole and well-formed.
pub fn dimensions(b: &[u8]) -> Option<Dimensions> {
    if b.starts_with(PNG_SIGNATURE) {
        png(b)
    } else if b.starts_with(&[0xFF, 0xD8]) {
        jpeg(b)
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        gif(b)
    } else if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        webp(b)
    } else {
        None
    }
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

fn be16(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u32::from(u16::from_be_bytes([s[0], s[1]])))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u32::from(u16::from_le_bytes([s[0], s[1]])))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(3)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], 0]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// PNG: the signature, then the IHDR chunk (it must come first): length,
/// `IHDR`, width and height as big-endian u32 (at most 2^31 - 1).
fn png(b: &[u8]) -> Option<Dimensions> {
    if b.get(12..16) != Some(b"IHDR") {
        return None;
    }
    let (w, h) = (be32(b, 16)?, be32(b, 20)?);
    if w > i32::MAX as u32 || h > i32::MAX as u32 {
        return None;
    }
    Dimensions::new(w, h)
}

/// JPEG: segments after SOI until the first start-of-frame (SOF0..SOF15
/// but DHT `C4`, JPG `C8` and DAC `CC`), which holds height then width. A
/// scan (SOS) or the end (EOI) before any frame is no image we can read,
/// and neither is a height of 0 (defined later by a DNL segment).
fn jpeg(b: &[u8]) -> Option<Dimensions> {
    let mut i = 2usize;
    loop {
        if *b.get(i)? != 0xFF {
            return None;
        }
        // Any number of fill bytes may come before a marker.
        while *b.get(i)? == 0xFF {
            i += 1;
        }
        let marker = *b.get(i)?;
        i += 1;
        match marker {
            // Markers that stand alone (no length): TEM, RSTn, SOI.
            0x01 | 0xD0..=0xD8 => continue,
            0xD9 | 0xDA => return None,
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                // Length (2), sample precision (1), height (2), width (2).
                let (h, w) = (be16(b, i + 3)?, be16(b, i + 5)?);
                return Dimensions::new(w, h);
            }
            _ => {
                let len = be16(b, i)? as usize;
                if len < 2 {
                    return None;
                }
                i = i.checked_add(len)?;
            }
        }
    }
}

/// GIF: the logical screen's width and height (little-endian u16); a
/// first frame that reaches past the screen widens it (a decoder may draw
/// it whole), when that frame's descriptor is within the bytes read.
fn gif(b: &[u8]) -> Option<Dimensions> {
    let (mut w, mut h) = (le16(b, 6)?, le16(b, 8)?);
    if let Some((fw, fh)) = first_frame(b) {
        w = w.max(fw);
        h = h.max(fh);
    }
    Dimensions::new(w, h)
}

/// The far corner of the first image descriptor, after the global colour
/// table and any extension blocks.
fn first_frame(b: &[u8]) -> Option<(u32, u32)> {
    let packed = *b.get(10)?;
    let mut i = 13usize;
    if packed & 0x80 != 0 {
        i += 3 * (1usize << ((packed & 0x07) + 1));
    }
    loop {
        match *b.get(i)? {
            // Extension: introducer, label, then sub-blocks until a 0.
            0x21 => {
                i += 2;
                loop {
                    let n = *b.get(i)? as usize;
                    i += 1 + n;
                    if n == 0 {
                        break;
                    }
                }
            }
            // Image descriptor: left, top, width, height.
            0x2C => {
                let (left, top) = (le16(b, i + 1)?, le16(b, i + 3)?);
                let (fw, fh) = (le16(b, i + 5)?, le16(b, i + 7)?);
                return Some((left + fw, top + fh));
            }
            _ => return None,
        }
    }
}

/// WebP: a RIFF container whose first chunk is the bitstream (`VP8 `,
/// lossy; `VP8L`, lossless) or the extended header (`VP8X`, with the
/// canvas size).
fn webp(b: &[u8]) -> Option<Dimensions> {
    match b.get(12..16)? {
        b"VP8 " => {
            // Frame tag (3 bytes, a key frame has bit 0 clear), start
            // code, then 14-bit width and height (2 bits of scale above).
            if b.get(20)? & 1 != 0 || b.get(23..26)? != [0x9D, 0x01, 0x2A] {
                return None;
            }
            Dimensions::new(le16(b, 26)? & 0x3FFF, le16(b, 28)? & 0x3FFF)
        }
        b"VP8L" => {
            // Signature 0x2F, then width - 1 and height - 1 in 14 bits each.
            if *b.get(20)? != 0x2F {
                return None;
            }
            let bits = le32(b, 21)?;
            Dimensions::new((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        }
        b"VP8X" => {
            // Flags (4 bytes), then canvas width - 1 and height - 1 in 24 bits.
            Dimensions::new(le24(b, 24)? + 1, le24(b, 27)? + 1)
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut b = PNG_SIGNATURE.to_vec();
        b.extend_from_slice(&13u32.to_be_bytes());
        b.extend_from_slice(b"IHDR");
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]); // depth.. CRC
        b
    }

    fn jpeg_header(w: u16, h: u16, sof: u8) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8];
        // APP0 (JFIF), 16 bytes.
        b.extend_from_slice(&[0xFF, 0xE0, 0x00, 0x10]);
        b.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        // DQT-like filler segment, then a DHT (C4: not a frame).
        b.extend_from_slice(&[0xFF, 0xDB, 0x00, 0x04, 0x00, 0x00]);
        b.extend_from_slice(&[0xFF, 0xC4, 0x00, 0x04, 0x00, 0x00]);
        // Fill bytes before the frame marker.
        b.extend_from_slice(&[0xFF, 0xFF, sof, 0x00, 0x11, 0x08]);
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&[0x03, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        b.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x02]);
        b
    }

    fn gif_header(w: u16, h: u16) -> Vec<u8> {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&w.to_le_bytes());
        b.extend_from_slice(&h.to_le_bytes());
        // A global colour table of 2 entries, then a graphic control
        // extension, then the first frame (0, 0, w, h).
        b.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 255, 255, 255]);
        b.extend_from_slice(&[0x21, 0xF9, 4, 0, 0, 0, 0, 0]);
        b.push(0x2C);
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(&w.to_le_bytes());
        b.extend_from_slice(&h.to_le_bytes());
        b.push(0);
        b
    }

    fn riff(chunk: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut b = b"RIFF".to_vec();
        b.extend_from_slice(&(4 + 8 + data.len() as u32).to_le_bytes());
        b.extend_from_slice(b"WEBP");
        b.extend_from_slice(chunk);
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(data);
        b
    }

    fn webp_lossy(w: u16, h: u16) -> Vec<u8> {
        let mut d = vec![0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A];
        d.extend_from_slice(&w.to_le_bytes());
        d.extend_from_slice(&h.to_le_bytes());
        d.extend_from_slice(&[0; 4]);
        riff(b"VP8 ", &d)
    }

    fn webp_lossless(w: u32, h: u32) -> Vec<u8> {
        let bits = (w - 1) | (h - 1) << 14;
        let mut d = vec![0x2F];
        d.extend_from_slice(&bits.to_le_bytes());
        riff(b"VP8L", &d)
    }

    fn webp_extended(w: u32, h: u32) -> Vec<u8> {
        let mut d = vec![0x10, 0, 0, 0];
        d.extend_from_slice(&(w - 1).to_le_bytes()[..3]);
        d.extend_from_slice(&(h - 1).to_le_bytes()[..3]);
        riff(b"VP8X", &d)
    }

    fn dims(width: u32, height: u32) -> Option<Dimensions> {
        Some(Dimensions { width, height })
    }

    /// Every valid header, with the dimensions it declares.
    fn samples() -> Vec<(&'static str, Vec<u8>, Option<Dimensions>)> {
        vec![
            ("png", png_header(1568, 1568), dims(1568, 1568)),
            ("png 1x1", png_header(1, 1), dims(1, 1)),
            ("jpeg sof0", jpeg_header(4000, 3000, 0xC0), dims(4000, 3000)),
            ("jpeg sof2", jpeg_header(640, 480, 0xC2), dims(640, 480)),
            ("jpeg sof15", jpeg_header(7, 9, 0xCF), dims(7, 9)),
            ("gif", gif_header(300, 200), dims(300, 200)),
            ("webp lossy", webp_lossy(1024, 768), dims(1024, 768)),
            ("webp lossless", webp_lossless(16384, 1), dims(16384, 1)),
            ("webp extended", webp_extended(5000, 4000), dims(5000, 4000)),
        ]
    }

    #[test]
    fn each_format_reads_its_dimensions() {
        for (name, bytes, want) in samples() {
            assert_eq!(dimensions(&bytes), want, "{name}");
        }
    }

    #[test]
    fn truncated_headers_are_unreadable_never_a_panic() {
        for (name, bytes, want) in samples() {
            // The smallest prefix that reads, and every one below it fails.
            let first = (0..=bytes.len())
                .find(|&n| dimensions(&bytes[..n]).is_some())
                .expect(name);
            assert_eq!(dimensions(&bytes[..first]), want, "{name}");
            for n in 0..first {
                assert_eq!(dimensions(&bytes[..n]), None, "{name} cut at {n}");
            }
        }
    }

    #[test]
    fn malformed_headers_are_unreadable_never_a_panic() {
        // Each byte of each header overwritten with a few values: any
        // answer but a panic is fine, and a zero size is never an answer.
        for (_, bytes, _) in samples() {
            for i in 0..bytes.len() {
                for v in [0x00, 0x01, 0x7F, 0xC4, 0xD9, 0xDA, 0xFF] {
                    let mut b = bytes.clone();
                    b[i] = v;
                    if let Some(d) = dimensions(&b) {
                        assert!(d.width > 0 && d.height > 0);
                    }
                }
            }
        }
        // A cheap pseudo-random walk over short inputs.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 48) as usize;
            // Give the walk the formats' magic numbers often.
            let magic: &[u8] = match x % 5 {
                0 => PNG_SIGNATURE,
                1 => &[0xFF, 0xD8],
                2 => b"GIF89a",
                3 => b"RIFF\0\0\0\0WEBPVP8X",
                _ => b"",
            };
            let mut b = magic.to_vec();
            b.extend((0..len).map(|k| (x >> (k % 8 * 8)) as u8));
            let _ = dimensions(&b);
        }
    }

    #[test]
    fn zero_sizes_and_other_formats_are_unreadable() {
        assert_eq!(dimensions(&png_header(0, 10)), None);
        assert_eq!(dimensions(&png_header(10, 0)), None);
        assert_eq!(dimensions(&png_header(u32::MAX, 10)), None);
        assert_eq!(dimensions(&jpeg_header(10, 0, 0xC0)), None, "DNL height");
        assert_eq!(dimensions(&gif_header(0, 0)), None);
        // A JPEG whose scan comes before any frame.
        assert_eq!(dimensions(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 2]), None);
        // A JPEG segment whose length is below its own two bytes.
        assert_eq!(
            dimensions(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 1, 0xFF, 0xC0]),
            None
        );
        // A PNG whose first chunk is not IHDR (Apple's CgBI).
        let mut cgbi = png_header(10, 10);
        cgbi[12..16].copy_from_slice(b"CgBI");
        assert_eq!(dimensions(&cgbi), None);
        for other in [
            b"BM\x36\0\0\0".as_slice(),
            b"\0\0\0\x1cftypavif",
            b"%PDF-1.7",
            b"",
        ] {
            assert_eq!(dimensions(other), None);
        }
        // A lossy WebP that is not a key frame.
        let mut inter = webp_lossy(10, 10);
        inter[20] |= 1;
        assert_eq!(dimensions(&inter), None);
    }

    #[test]
    fn a_gif_frame_past_the_screen_widens_it() {
        let mut b = gif_header(10, 10);
        // The frame's width (after the table, the extension and the
        // descriptor's left/top).
        let at = 13 + 6 + 8 + 1 + 4;
        b[at..at + 2].copy_from_slice(&2000u16.to_le_bytes());
        assert_eq!(dimensions(&b), dims(2000, 10));
    }
}
