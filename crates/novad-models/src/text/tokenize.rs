use foldhash::{HashSet, HashSetExt};
use serde::{Deserialize, Serialize};

use super::unicode::{for_each_piece, other_languages_stop_words, piece_len};
use super::ENGLISH_STOP_WORDS;

/// A tokenizer other than the classic one, as a model's parameters name it
/// (`tokenizer = "unicode"`); a parameter set without one (`None`) uses the classic tokenizer,
/// which stores created before the choice existed keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenizerVersion {
    /// Words in every script: see [`Tokenizer::unicode`].
    Unicode,
}

/// A deterministic word tokenizer, classic ([`Tokenizer::new`]) or Unicode
/// ([`Tokenizer::unicode`]).
///
/// The classic rules, applied in order:
/// 1. the text is split on every character that is not alphanumeric (Unicode `Alphabetic` or
///    `Numeric`), so punctuation, whitespace, symbols and control characters separate tokens;
/// 2. each piece is lowercased with Unicode's full lowercase mapping;
/// 3. pieces shorter than `min_len` or longer than `max_len` characters are dropped (the upper
///    bound keeps base64 blobs and URLs-without-punctuation out of the vocabulary);
/// 4. pieces made only of numeric characters are dropped;
/// 5. stop words are dropped.
///
/// The classic rules do not normalise (an NFD "Über" loses its umlaut), cut words of Indic and
/// South-East Asian scripts at their combining marks, and leave a Chinese or Japanese clause
/// as one piece (usually longer than `max_len`, so dropped). The Unicode rules fix all three.
///
/// The same text always yields the same tokens in the same order.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    pub(super) min_len: usize,
    pub(super) max_len: usize,
    pub(super) stop: HashSet<String>,
    /// The Unicode rules instead of the classic ones.
    unicode: bool,
}

impl Tokenizer {
    /// The classic tokenizer with the given length bounds (in characters);
    /// `builtin_stop_words` enables [`ENGLISH_STOP_WORDS`], `extra_stop_words` are added
    /// (compared after lowercasing).
    pub fn new(
        min_len: usize,
        max_len: usize,
        builtin_stop_words: bool,
        extra_stop_words: &[String],
    ) -> Self {
        let mut stop: HashSet<String> = HashSet::new();
        if builtin_stop_words {
            stop.extend(ENGLISH_STOP_WORDS.iter().map(|s| s.to_string()));
        }
        stop.extend(extra_stop_words.iter().map(|s| s.to_lowercase()));
        Tokenizer {
            min_len,
            max_len,
            stop,
            unicode: false,
        }
    }

    /// The Unicode tokenizer. Rules, applied in order:
    /// 1. the text is split at ASCII whitespace into chunks;
    /// 2. each chunk is normalised to NFKC (canonically equivalent spellings and compatibility
    ///    variants such as full-width letters become one spelling);
    /// 3. it is cut at UAX #29 word boundaries, with dictionary segmentation for Chinese,
    ///    Japanese, Thai, Lao, Khmer and Burmese; segments that are not word-like
    ///    (punctuation, symbols) are dropped;
    /// 4. each word is cut at the characters that are not letters, digits, combining marks or
    ///    zero-width (non-)joiners (so "don't" gives "don" and "t", as in the classic rules,
    ///    and a virama stays inside its word);
    /// 5. pieces whose length is below `min_len` or above `max_len` are dropped, the length
    ///    counting characters with a Han, kana or Hangul character counting 2 (one Han
    ///    character is a word: with `min_len` 2 it is kept);
    /// 6. pieces made only of numeric characters are dropped;
    /// 7. each piece is lowercased with Unicode's full lowercase mapping;
    /// 8. stop words are dropped: with `builtin_stop_words`, [`ENGLISH_STOP_WORDS`] and the
    ///    non-ASCII entries of the stopwords-iso lists of 28 common languages (Chinese,
    ///    Japanese, Korean, Russian, Arabic, Hindi, Thai, German "für", French "après", …; an
    ///    ASCII stop word of another language is often an English content word, "die", "war",
    ///    so those are left to IDF); `extra_stop_words` normalised and lowercased like tokens.
    ///
    /// On ASCII text the Unicode rules give exactly the classic tokens (an ASCII run of
    /// letters and digits is never cut by UAX #29, NFKC and lowercasing of ASCII are ASCII),
    /// and ASCII chunks take the classic tokenizer's fast path.
    pub fn unicode(
        min_len: usize,
        max_len: usize,
        builtin_stop_words: bool,
        extra_stop_words: &[String],
    ) -> Self {
        let mut t = Tokenizer::new(min_len, max_len, builtin_stop_words, &[]);
        if builtin_stop_words {
            t.stop.extend(other_languages_stop_words().iter().cloned());
        }
        t.stop.extend(
            extra_stop_words
                .iter()
                .map(|s| super::unicode::normalize(s).to_lowercase()),
        );
        t.unicode = true;
        t
    }

    /// The tokenizer of `version` (`None`: [`Tokenizer::new`], the classic one).
    pub fn with_version(
        version: Option<TokenizerVersion>,
        min_len: usize,
        max_len: usize,
        builtin_stop_words: bool,
        extra_stop_words: &[String],
    ) -> Self {
        match version {
            None => Tokenizer::new(min_len, max_len, builtin_stop_words, extra_stop_words),
            Some(TokenizerVersion::Unicode) => {
                Tokenizer::unicode(min_len, max_len, builtin_stop_words, extra_stop_words)
            }
        }
    }

    /// Which rules this tokenizer applies (`None`: the classic ones).
    pub fn version(&self) -> Option<TokenizerVersion> {
        self.unicode.then_some(TokenizerVersion::Unicode)
    }

    /// The tokens of `text`, in order of occurrence (duplicates kept).
    pub fn tokens(&self, text: &str) -> Vec<String> {
        if text.is_ascii() {
            return self.ascii_tokens(text);
        }
        if self.unicode {
            return self.unicode_tokens(text);
        }
        let mut out = Vec::new();
        let mut buf = String::new();
        for piece in text.split(|c: char| !c.is_alphanumeric()) {
            if piece.is_empty() {
                continue;
            }
            if piece.is_ascii() {
                self.push_ascii(piece, &mut buf, &mut out);
                continue;
            }
            let n = piece.chars().count();
            if n < self.min_len || n > self.max_len || piece.chars().all(char::is_numeric) {
                continue;
            }
            let lower = piece.to_lowercase();
            if !self.stop.contains(&lower) {
                out.push(lower);
            }
        }
        out
    }

    /// The Unicode rules on a text that is not all ASCII: ASCII chunks take the fast path.
    fn unicode_tokens(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = String::new();
        for chunk in text.split(|c: char| c.is_ascii_whitespace()) {
            if chunk.is_ascii() {
                for piece in chunk.split(|c: char| !c.is_ascii_alphanumeric()) {
                    if !piece.is_empty() {
                        self.push_ascii(piece, &mut buf, &mut out);
                    }
                }
            } else {
                self.push_unicode_chunk(chunk, &mut out);
            }
        }
        out
    }

    /// Rules 2–8 of [`Tokenizer::unicode`] on one chunk, whatever its characters.
    pub(super) fn push_unicode_chunk(&self, chunk: &str, out: &mut Vec<String>) {
        for_each_piece(chunk, |piece| {
            let n = piece_len(piece);
            if n < self.min_len || n > self.max_len || piece.chars().all(char::is_numeric) {
                return;
            }
            let lower = piece.to_lowercase();
            if !self.stop.contains(&lower) {
                out.push(lower);
            }
        });
    }

    /// [`Self::tokens`] of an ASCII text: for ASCII, `char::is_alphanumeric` is
    /// `is_ascii_alphanumeric`, `char::is_numeric` is `is_ascii_digit`, a piece's length in
    /// characters is its length in bytes and the Unicode lowercase mapping is
    /// `to_ascii_lowercase`, so the classic rules give the same tokens; so do the Unicode
    /// rules (see [`Tokenizer::unicode`]).
    fn ascii_tokens(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = String::new();
        for piece in text.split(|c: char| !c.is_ascii_alphanumeric()) {
            if !piece.is_empty() {
                self.push_ascii(piece, &mut buf, &mut out);
            }
        }
        out
    }

    /// The rules for one non-empty ASCII piece; `buf` is scratch space, so only kept tokens
    /// are allocated.
    fn push_ascii(&self, piece: &str, buf: &mut String, out: &mut Vec<String>) {
        let n = piece.len();
        if n < self.min_len || n > self.max_len || piece.bytes().all(|b| b.is_ascii_digit()) {
            return;
        }
        buf.clear();
        buf.push_str(piece);
        buf.make_ascii_lowercase();
        if !self.stop.contains(buf.as_str()) {
            out.push(buf.clone());
        }
    }
}

impl Default for Tokenizer {
    /// The classic tokenizer with the default bounds 2..=40 and the English stop words.
    fn default() -> Self {
        Tokenizer::new(2, 40, true, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lowercases_and_filters() {
        let t = Tokenizer::default();
        assert_eq!(
            t.tokens("The QUICK brown-fox, 2024 x86 a Über!! über"),
            vec!["quick", "brown", "fox", "x86", "über", "über"]
        );
    }

    #[test]
    fn stop_words_only_gives_nothing() {
        let t = Tokenizer::default();
        assert!(t.tokens("the and of it is was").is_empty());
        assert!(t.tokens("").is_empty());
        assert!(t.tokens("12 345 ... !!").is_empty());
    }

    /// The rules transcribed one by one, without the ASCII shortcut.
    fn by_the_rules(t: &Tokenizer, text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|p| !p.is_empty())
            .filter(|p| (t.min_len..=t.max_len).contains(&p.chars().count()))
            .filter(|p| !p.chars().all(char::is_numeric))
            .map(str::to_lowercase)
            .filter(|l| !t.stop.contains(l))
            .collect()
    }

    /// ASCII and other pieces (accents, Greek, the Kelvin sign and 'İ', whose lowercase
    /// changes length, digits of other scripts) give exactly the rules' tokens.
    #[test]
    fn the_ascii_shortcut_gives_the_rules_tokens() {
        use rand::{Rng, SeedableRng};
        let alphabet: Vec<char> = "aZq09 .-_,Ü'é\u{212A}İσΣ٣\tx".chars().collect();
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        for t in [
            Tokenizer::default(),
            Tokenizer::new(1, 3, false, &["KZ".into()]),
        ] {
            for _ in 0..2000 {
                let n = r.random_range(0..40);
                let text: String = (0..n)
                    .map(|_| alphabet[r.random_range(0..alphabet.len())])
                    .collect();
                assert_eq!(t.tokens(&text), by_the_rules(&t, &text), "{text:?}");
            }
            let words = "The Über ÉTÉ x86 \u{212A}elvin İstanbul ΣΟΦΙΑ 2024 ٣٤";
            assert_eq!(t.tokens(words), by_the_rules(&t, words));
        }
    }

    #[test]
    fn extra_stop_words_and_length_bounds() {
        let t = Tokenizer::new(3, 5, false, &["Foo".to_string()]);
        assert_eq!(t.tokens("foo the ab abcdef abcde"), vec!["the", "abcde"]);
    }
}
