use foldhash::{HashSet, HashSetExt};

use super::ENGLISH_STOP_WORDS;

/// A deterministic word tokenizer.
///
/// Rules, applied in order:
/// 1. the text is split on every character that is not alphanumeric (Unicode `Alphabetic` or
///    `Numeric`), so punctuation, whitespace, symbols and control characters separate tokens;
/// 2. each piece is lowercased with Unicode's full lowercase mapping;
/// 3. pieces shorter than `min_len` or longer than `max_len` characters are dropped (the upper
///    bound keeps base64 blobs and URLs-without-punctuation out of the vocabulary);
/// 4. pieces made only of numeric characters are dropped;
/// 5. stop words are dropped.
///
/// The same text always yields the same tokens in the same order.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    min_len: usize,
    max_len: usize,
    stop: HashSet<String>,
}

impl Tokenizer {
    /// A tokenizer with the given length bounds (in characters); `builtin_stop_words` enables
    /// [`ENGLISH_STOP_WORDS`], `extra_stop_words` are added (compared after lowercasing).
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
        }
    }

    /// The tokens of `text`, in order of occurrence (duplicates kept).
    pub fn tokens(&self, text: &str) -> Vec<String> {
        if text.is_ascii() {
            return self.ascii_tokens(text);
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

    /// [`Self::tokens`] of an ASCII text: for ASCII, `char::is_alphanumeric` is
    /// `is_ascii_alphanumeric`, `char::is_numeric` is `is_ascii_digit`, a piece's length in
    /// characters is its length in bytes and the Unicode lowercase mapping is
    /// `to_ascii_lowercase`, so the rules give the same tokens.
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
