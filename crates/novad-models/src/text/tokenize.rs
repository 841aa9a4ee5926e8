use std::collections::HashSet;

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
        let mut out = Vec::new();
        for piece in text.split(|c: char| !c.is_alphanumeric()) {
            if piece.is_empty() {
                continue;
            }
            let n = piece.chars().count();
            if n < self.min_len || n > self.max_len {
                continue;
            }
            if piece.chars().all(char::is_numeric) {
                continue;
            }
            let lower = piece.to_lowercase();
            if self.stop.contains(&lower) {
                continue;
            }
            out.push(lower);
        }
        out
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

    #[test]
    fn extra_stop_words_and_length_bounds() {
        let t = Tokenizer::new(3, 5, false, &["Foo".to_string()]);
        assert_eq!(t.tokens("foo the ab abcdef abcde"), vec!["the", "abcde"]);
    }
}
