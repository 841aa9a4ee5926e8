//! The pieces of the Unicode tokenizer ([`TokenizerVersion::Unicode`](super::TokenizerVersion)):
//! normalisation, word segmentation in every script, the length of a piece and the stop words
//! of other languages than English.
//!
//! Libraries, and why:
//! - `unicode-normalization`: NFKC, so that canonically equivalent spellings (German in NFD,
//!   Vietnamese with stacked marks) and compatibility variants (full-width Latin, half-width
//!   katakana, ligatures) are one term;
//! - `icu_segmenter` (ICU4X, its data compiled in): UAX #29 word boundaries, so combining marks
//!   (Devanagari viramas and vowel signs, Thai vowels and tone marks) stay in their words, and
//!   dictionary segmentation of the scripts written without spaces (Chinese, Japanese, Thai,
//!   Lao, Khmer, Burmese). It is the maintained implementation of both in one segmenter, so the
//!   tokenizer does not need `unicode-segmentation` beside it. The dictionary segmenter is used
//!   for Thai and the other South-East Asian scripts too (not ICU4X's LSTM models): it is
//!   faster and needs no model data. CJK bigrams (Lucene's CJKAnalyzer) were the fallback and
//!   are not needed;
//! - `stop-words`: the stopwords-iso lists of the common languages.

use std::borrow::Cow;
use std::sync::LazyLock;

use icu_segmenter::options::WordBreakInvariantOptions;
use icu_segmenter::{WordSegmenter, WordSegmenterBorrowed};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// The word segmenter: UAX #29 with dictionaries for the scripts written without spaces.
static SEGMENTER: LazyLock<WordSegmenterBorrowed<'static>> =
    LazyLock::new(|| WordSegmenter::new_dictionary(WordBreakInvariantOptions::default()));

/// Languages whose stopwords-iso list the Unicode tokenizer uses (besides its English list):
/// the common languages of news and web text in Latin, Cyrillic, Greek, Arabic, Hebrew,
/// Indic, Thai and East Asian scripts.
const STOP_LANGUAGES: [&str; 28] = [
    "ar", "bg", "bn", "cs", "da", "de", "el", "es", "fa", "fi", "fr", "he", "hi", "hu", "it", "ja",
    "ko", "nl", "no", "pl", "pt", "ro", "ru", "sv", "th", "tr", "uk", "zh",
];

/// The other languages' stop words, normalised as tokens are (NFKC, lowercase): the entries of
/// the [`STOP_LANGUAGES`] lists that contain a non-ASCII character and no whitespace.
///
/// ASCII entries are left out on purpose: an ASCII stop word of another language is often an
/// English content word (German "die", "war", "also"; Italian "come"; French "pour"), and on
/// ASCII text the Unicode tokenizer keeps exactly the classic tokenizer's English tokens.
/// Their weight in a document is left to the inverse document frequency.
pub(crate) fn other_languages_stop_words() -> &'static [String] {
    static WORDS: LazyLock<Vec<String>> = LazyLock::new(|| {
        let mut w: Vec<String> = STOP_LANGUAGES
            .iter()
            .filter_map(|l| stop_words::lookup(l))
            .flatten()
            .filter(|s| !s.is_ascii() && !s.chars().any(char::is_whitespace))
            .map(|s| normalize(s).to_lowercase())
            .collect();
        w.sort();
        w.dedup();
        w
    });
    &WORDS
}

/// `text` in Unicode normalisation form KC; borrowed when it already is (always for ASCII).
pub(crate) fn normalize(text: &str) -> Cow<'_, str> {
    if is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.nfkc().collect())
    }
}

/// Whether `c` belongs inside a word piece: a letter or digit (Unicode `Alphabetic` or
/// `Numeric`), a combining mark (General Category M: viramas, vowel signs, accents of NFD
/// text), or a zero-width joiner or non-joiner (written inside Indic and Persian words).
pub(crate) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || is_combining_mark(c) || c == '\u{200C}' || c == '\u{200D}'
}

/// Whether `c` is written full width in East Asian text: a Han ideograph, kana, a Hangul
/// syllable or jamo, or a CJK compatibility ideograph.
pub(crate) fn is_wide(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF      // Hangul jamo
        | 0x3040..=0x30FF    // hiragana, katakana
        | 0x3130..=0x318F    // Hangul compatibility jamo
        | 0x31F0..=0x31FF    // katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xA960..=0xA97F    // Hangul jamo extended A
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xD7B0..=0xD7FF    // Hangul jamo extended B
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x3FFFF  // CJK extensions B and later, compatibility supplement
    )
}

/// The length of a piece for the token length bounds: its characters, a wide character
/// ([`is_wide`]) counting 2. One Han character is a whole word (火 "fire", 村 "village") and
/// carries about as much as a short Latin word, so with the default `min_token_len` of 2 it is
/// kept; a 20-character ideographic run reaches the default `max_token_len` of 40.
pub(crate) fn piece_len(piece: &str) -> usize {
    piece.chars().map(|c| if is_wide(c) { 2 } else { 1 }).sum()
}

/// Calls `f` with every word piece of `chunk` (a text without ASCII whitespace), in order:
/// `chunk` is NFKC-normalised, cut into UAX #29 words (dictionary words in the scripts written
/// without spaces), and each word-like segment is cut further at the characters that are not
/// [`is_word_char`] (apostrophes, underscores, the full stop of "3.14"), so that on ASCII the
/// pieces are exactly the maximal runs of ASCII letters and digits. Pieces are not empty and
/// not lowercased.
pub(crate) fn for_each_piece(chunk: &str, mut f: impl FnMut(&str)) {
    let text = normalize(chunk);
    let mut start = 0;
    for (end, kind) in SEGMENTER.segment_str(&text).iter_with_word_type() {
        if end > start && kind.is_word_like() {
            for piece in text[start..end].split(|c: char| !is_word_char(c)) {
                if !piece.is_empty() {
                    f(piece);
                }
            }
        }
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use unicode_normalization::UnicodeNormalization;

    use crate::text::{tfidf_l1, Tokenizer, TokenizerVersion, Vocabulary};

    fn unicode() -> Tokenizer {
        Tokenizer::unicode(2, 40, true, &[])
    }

    /// One German sentence in NFC and in NFD: the Unicode tokenizer gives the same tokens and
    /// so the same TF-IDF vector; the classic one loses the umlauts of the NFD spelling.
    #[test]
    fn nfc_and_nfd_german_give_the_same_tokens_and_vector() {
        let s = "Über die Brücke gingen Männer, Frauen und Kinder zum Schloß am Fluß";
        let nfc: String = s.nfc().collect();
        let nfd: String = s.nfd().collect();
        assert_ne!(nfc, nfd);
        let t = unicode();
        let (a, b) = (t.tokens(&nfc), t.tokens(&nfd));
        assert_eq!(a, b);
        for w in ["brücke", "männer", "schloß", "fluß"] {
            assert!(a.contains(&w.to_string()), "{w} in {a:?}");
        }
        let mut vocab = Vocabulary::new(1000);
        let (counts, _) = vocab.observe(&[a, b], 0);
        let v: Vec<_> = counts
            .iter()
            .map(|c| tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
            .collect();
        assert!(!v[0].ids.is_empty());
        assert_eq!(v[0], v[1]);
        let classic = Tokenizer::default();
        assert_ne!(classic.tokens(&nfc), classic.tokens(&nfd));
    }

    /// Viramas and vowel signs are combining marks, not `Alphabetic`: the classic rules cut
    /// ज्वालामुखी ("volcano") after its first consonant, the Unicode rules keep it whole.
    #[test]
    fn a_devanagari_word_stays_one_token() {
        let s = "ज्वालामुखी फट गया, लावा बह रहा है";
        let tokens = unicode().tokens(s);
        assert!(tokens.contains(&"ज्वालामुखी".to_string()), "{tokens:?}");
        assert!(!tokens.contains(&"वालामुखी".to_string()));
        assert!(Tokenizer::default()
            .tokens(s)
            .contains(&"वालामुखी".to_string()));
    }

    /// A Chinese sentence without punctuation: several dictionary words, not one clause and
    /// not nothing; function words (的) are stop words; a one-character word (村) is kept.
    #[test]
    fn a_chinese_sentence_gives_several_words() {
        let s = "火山昨天晚上突然喷发熔岩流向附近的村庄居民紧急撤离";
        let tokens = unicode().tokens(s);
        assert!(tokens.len() >= 6, "{tokens:?}");
        for w in ["火山", "喷发", "熔岩", "村庄", "撤离"] {
            assert!(tokens.contains(&w.to_string()), "{w} in {tokens:?}");
        }
        assert!(!tokens.contains(&"的".to_string()));
        assert!(tokens.iter().all(|t| t.chars().count() <= 4), "{tokens:?}");
        assert_eq!(Tokenizer::default().tokens(s), vec![s.to_string()]);
        let one = unicode().tokens("火 村");
        assert_eq!(one, vec!["火", "村"]);
        assert!(Tokenizer::unicode(3, 40, true, &[])
            .tokens("火 村")
            .is_empty());
    }

    #[test]
    fn a_japanese_sentence_gives_several_words() {
        let s = "昨日の夜に火山が突然噴火して溶岩が近くの村に流れた";
        let tokens = unicode().tokens(s);
        assert!(tokens.len() >= 5, "{tokens:?}");
        for w in ["火山", "噴火", "溶岩", "村"] {
            assert!(tokens.contains(&w.to_string()), "{w} in {tokens:?}");
        }
        for particle in ["の", "に", "が"] {
            assert!(!tokens.contains(&particle.to_string()), "{tokens:?}");
        }
    }

    /// Thai is written without spaces and with combining vowels and tone marks: dictionary
    /// words, none starting with a combining mark.
    #[test]
    fn a_thai_sentence_gives_several_words() {
        let s = "ภูเขาไฟระเบิดเมื่อคืนนี้ลาวาไหลเข้าหมู่บ้าน";
        let tokens = unicode().tokens(s);
        assert!(tokens.len() >= 4, "{tokens:?}");
        // "volcano", "lava", "village"
        for w in ["ภูเขาไฟ", "ลาวา", "หมู่บ้าน"] {
            assert!(tokens.contains(&w.to_string()), "{w} in {tokens:?}");
        }
        for t in &tokens {
            let first = t.chars().next().unwrap();
            assert!(!super::is_combining_mark(first), "{t:?}");
        }
    }

    /// The classic tokenizer keeps today's tokens exactly (written out by hand): the virama
    /// cuts the Hindi word, the Chinese clause is one piece, "don" is an English stop word,
    /// the combining diaeresis after "Über" separates.
    #[test]
    fn the_classic_tokenizer_keeps_its_tokens() {
        let s = "Der Vulkan ÄTNA brach aus: ज्वालामुखी 火山喷发 don't e-mail x86 2024 Über\u{308}";
        assert_eq!(
            Tokenizer::default().tokens(s),
            vec![
                "der",
                "vulkan",
                "ätna",
                "brach",
                "aus",
                "वालामुखी",
                "火山喷发",
                "mail",
                "x86",
                "über",
            ]
        );
    }

    /// Compatibility forms become one spelling; other languages' non-ASCII stop words are
    /// dropped, their ASCII ones (English words too) kept; extra stop words are normalised.
    #[test]
    fn compatibility_forms_and_stop_words() {
        let t = Tokenizer::unicode(2, 40, true, &["ＶＯＬＣＡＮＯ".to_string()]);
        assert_eq!(t.tokens("ＮＡＳＡ ﬂood"), vec!["nasa", "flood"]);
        assert_eq!(t.tokens("für die Stadt volcano"), vec!["die", "stadt"]);
        assert_eq!(t.tokens("больше вулкан"), vec!["вулкан"]);
        let bare = Tokenizer::unicode(2, 40, false, &[]);
        assert_eq!(bare.tokens("für the"), vec!["für", "the"]);
        assert_eq!(t.version(), Some(TokenizerVersion::Unicode));
        assert_eq!(Tokenizer::default().version(), None);
    }

    /// On ASCII the Unicode rules (normalisation, UAX #29, cutting at non-word characters)
    /// give the fast path's tokens, which are the classic tokenizer's.
    #[test]
    fn ascii_chunks_give_the_full_rules_tokens() {
        use rand::{Rng, SeedableRng};
        let alphabet: Vec<char> = "aZq09 .-_,:'\"@/x\tK()$#%".chars().collect();
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for t in [unicode(), Tokenizer::unicode(1, 3, false, &["kz".into()])] {
            let classic = Tokenizer::new(t.min_len, t.max_len, false, &[]);
            for _ in 0..2000 {
                let n = r.random_range(0..40);
                let text: String = (0..n)
                    .map(|_| alphabet[r.random_range(0..alphabet.len())])
                    .collect();
                let mut slow = Vec::new();
                for chunk in text.split(|c: char| c.is_ascii_whitespace()) {
                    t.push_unicode_chunk(chunk, &mut slow);
                }
                assert_eq!(t.tokens(&text), slow, "{text:?}");
                // the classic tokens less the stop words
                let want: Vec<String> = classic
                    .tokens(&text)
                    .into_iter()
                    .filter(|w| !t.stop.contains(w))
                    .collect();
                assert_eq!(slow, want, "{text:?}");
            }
        }
    }

    /// Mixed texts: a chunk's tokens do not depend on the chunks around it, ASCII chunks of a
    /// mixed text give the classic tokens.
    #[test]
    fn mixed_texts_split_at_ascii_whitespace() {
        let t = unicode();
        let a = "The eruption of Mount Etna 火山喷发";
        let tokens = t.tokens(a);
        assert_eq!(tokens[..3], ["eruption", "mount", "etna"]);
        assert_eq!(tokens[3..], t.tokens("火山喷发")[..]);
        assert_eq!(t.tokens("naïve café's"), vec!["naïve", "café"]);
    }
}
