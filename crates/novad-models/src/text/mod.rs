//! Text to vectors: tokenizers (classic and Unicode), a bounded streaming vocabulary, TF-IDF
//! columns of unit ℓ1 norm.

mod stopwords;
mod terms;
mod tokenize;
mod unicode;
mod vectorize;
mod vocab;

pub use stopwords::ENGLISH_STOP_WORDS;
pub use tokenize::{Tokenizer, TokenizerVersion};
pub use vectorize::{tfidf_l1, SparseDoc};
pub use vocab::{Remap, Term, VocabChange, Vocabulary};
