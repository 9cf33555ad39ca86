//! How many pages a PDF has, counted cheaply and never below the truth.
//!
//! A PDF document is billed per page (each page is an image and its
//! text), so the gateway needs a page count it can trust as an upper
//! bound without a PDF library. Every page is an indirect object whose
//! dictionary says `/Type /Page`; in a file without object streams each
//! one is there in the clear, so counting them (names decoded, `#xx`
//! escapes included, comments skipped) cannot come out low. The page
//! tree's `/Count` is read too, as a second opinion.
//!
//! What cannot be counted this way answers `None` (the caller reserves the
//! provider's maximum): a file that is no PDF, one with object streams
//! (`/ObjStm`, where page objects hide compressed), or one where no page
//! was found.

/// The provider's most pages in one request (Anthropic's PDF support:
/// "Maximum pages per request: 100"); a tree's `/Count` above it is taken
/// as this many (the provider refuses a longer document: nothing billed).
pub const MAX_PAGES: u64 = 100;

/// An upper bound on `pdf`'s pages, or `None` when it cannot be counted.
pub fn pages(pdf: &[u8]) -> Option<u64> {
    // The header may follow up to 1 KiB of junk (as readers allow).
    let head = &pdf[..pdf.len().min(1024 + 5)];
    if !head.windows(5).any(|w| w == b"%PDF-") {
        return None;
    }
    let mut lex = Lexer { b: pdf, i: 0 };
    let mut pages = 0u64;
    let mut tree_count = 0u64;
    let mut previous: Option<Token> = None;
    while let Some(token) = lex.next() {
        match (&previous, &token) {
            (Some(Token::Name(k)), Token::Name(v)) if k == b"Type" && v == b"Page" => {
                pages += 1;
            }
            (Some(Token::Name(k)), Token::Number(n)) if k == b"Count" => {
                tree_count = tree_count.max(*n);
            }
            _ => {}
        }
        if matches!(&token, Token::Name(n) if n == b"ObjStm") {
            return None;
        }
        previous = Some(token);
    }
    let pages = pages.max(tree_count.min(MAX_PAGES));
    (pages > 0).then_some(pages)
}

#[derive(Debug, PartialEq)]
enum Token {
    /// A name, its `#xx` escapes decoded (`/Ty#70e` is `/Type`).
    Name(Vec<u8>),
    /// A non-negative integer (saturating).
    Number(u64),
    /// Anything else: a delimiter, a keyword, a string's bytes.
    Other,
}

struct Lexer<'a> {
    b: &'a [u8],
    i: usize,
}

fn is_space(c: u8) -> bool {
    matches!(c, b'\0' | b'\t' | b'\n' | b'\x0C' | b'\r' | b' ')
}

fn is_delimiter(c: u8) -> bool {
    matches!(
        c,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

impl Lexer<'_> {
    /// The next token, whitespace and comments skipped. Strings and
    /// stream data are not parsed as such: their bytes come out as tokens
    /// too, which can only add pages, never hide one.
    fn next(&mut self) -> Option<Token> {
        loop {
            let c = *self.b.get(self.i)?;
            if is_space(c) {
                self.i += 1;
            } else if c == b'%' {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|&c| c != b'\n' && c != b'\r')
                {
                    self.i += 1;
                }
            } else {
                break;
            }
        }
        let c = self.b[self.i];
        self.i += 1;
        if c == b'/' {
            let mut name = Vec::new();
            while let Some(&c) = self.b.get(self.i) {
                if is_space(c) || is_delimiter(c) {
                    break;
                }
                self.i += 1;
                if c == b'#' {
                    let hex = self
                        .b
                        .get(self.i..self.i + 2)
                        .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
                    if let Some(v) = hex {
                        name.push(v);
                        self.i += 2;
                        continue;
                    }
                }
                name.push(c);
            }
            return Some(Token::Name(name));
        }
        if c.is_ascii_digit() {
            let mut n = u64::from(c - b'0');
            while let Some(&d) = self.b.get(self.i).filter(|d| d.is_ascii_digit()) {
                n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
                self.i += 1;
            }
            return Some(Token::Number(n));
        }
        Some(Token::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdf(objects: &[&str]) -> Vec<u8> {
        let mut s = String::from("%PDF-1.4\n%\u{e2}\u{e3}\n");
        for (i, o) in objects.iter().enumerate() {
            s.push_str(&format!("{} 0 obj\n{o}\nendobj\n", i + 1));
        }
        s.push_str("trailer\n<< /Root 1 0 R >>\n%%EOF\n");
        s.into_bytes()
    }

    #[test]
    fn pages_are_counted_not_the_tree() {
        let three = pdf(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
            "<</Type/Page/Parent 2 0 R>>",
            "<< /Type\n% a comment\n/Page >>",
        ]);
        assert_eq!(pages(&three), Some(3));
        // Escaped names are the same names to a reader.
        let escaped = pdf(&["<< /Ty#70e /#50age >>", "<< /Type /Pa#67e >>"]);
        assert_eq!(pages(&escaped), Some(2));
    }

    #[test]
    fn the_tree_count_is_a_floor_up_to_the_providers_maximum() {
        let hidden = pdf(&["<< /Type /Pages /Count 40 >>", "<< /Type /Page >>"]);
        assert_eq!(pages(&hidden), Some(40));
        let huge = pdf(&["<< /Type /Pages /Count 999999999999999999999999 >>"]);
        assert_eq!(pages(&huge), Some(MAX_PAGES));
    }

    #[test]
    fn what_cannot_be_counted_is_none() {
        // Page objects compressed in an object stream.
        let objstm = pdf(&[
            "<< /Type /Page >>",
            "<< /Type /ObjStm /N 50 /First 300 /Length 9 >>\nstream\nx...\nendstream",
        ]);
        assert_eq!(pages(&objstm), None);
        assert_eq!(pages(&pdf(&["<< /Type /Catalog >>"])), None);
        assert_eq!(pages(b"not a pdf /Type /Page"), None);
        assert_eq!(pages(b""), None);
        assert_eq!(pages(b"%PDF-"), None);
        // Cut anywhere, or garbage: an answer or none, never a panic.
        let doc = pdf(&["<< /Type /Page /X #4 /Y# >>"]);
        for n in 0..doc.len() {
            let _ = pages(&doc[..n]);
        }
        assert_eq!(pages(&doc), Some(1));
        let mut junk = b"%PDF-1.7 ".to_vec();
        junk.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        let _ = pages(&junk);
    }
}
