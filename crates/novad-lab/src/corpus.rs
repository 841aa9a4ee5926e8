//! Readers for evaluation corpora. The 20 Newsgroups "bydate" archive is read directly from its
//! canonical `20news-bydate.tar.gz` (gzip + tar), as users download it.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use novad_models::memory::{term_key, TermVector};
use novad_models::text::{tfidf_l1, Vocabulary};
use thiserror::Error;

/// Where the tests and examples find the 20 Newsgroups archive: `$NOVAD_20NG` when set,
/// otherwise `../shared/data/20news-bydate.tar.gz` beside the workspace root.
pub fn archive_20news() -> PathBuf {
    match std::env::var_os("NOVAD_20NG") {
        Some(p) => PathBuf::from(p),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/20news-bydate.tar.gz")
        }
    }
}

/// One post of the 20 Newsgroups archive.
#[derive(Debug, Clone, PartialEq)]
pub struct Post {
    /// Newsgroup, e.g. `sci.space` (from the path).
    pub group: String,
    /// `train` or `test` (from the top directory `20news-bydate-train|test`).
    pub split: String,
    /// The news server's article number (the file name): arrival order within a group.
    pub number: u64,
    /// The body: everything after the first blank line (the remaining headers are dropped).
    pub text: String,
}

#[derive(Debug, Error)]
pub enum CorpusError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: entry `{entry}` is not <split>/<group>/<number>")]
    Layout { path: String, entry: String },
}

/// Read every post of a 20 Newsgroups bydate archive (`.tar.gz`). Posts are returned sorted by
/// (group, number, split); text is decoded as UTF-8 with invalid bytes replaced (the archive
/// is Latin-1 in places).
pub fn read_20news(path: &Path) -> Result<Vec<Post>, CorpusError> {
    let p = path.display().to_string();
    let io = |source| CorpusError::Io {
        path: p.clone(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let mut ar = tar::Archive::new(GzDecoder::new(file));
    let mut posts = Vec::new();
    for entry in ar.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path().map_err(io)?.to_string_lossy().into_owned();
        let parts: Vec<&str> = name.trim_start_matches("./").split('/').collect();
        if parts.len() != 3 {
            return Err(CorpusError::Layout {
                path: p.clone(),
                entry: name,
            });
        }
        let split = parts[0]
            .strip_prefix("20news-bydate-")
            .unwrap_or(parts[0])
            .to_string();
        let number: u64 = parts[2].parse().map_err(|_| CorpusError::Layout {
            path: p.clone(),
            entry: name.clone(),
        })?;
        let mut raw = Vec::new();
        entry.read_to_end(&mut raw).map_err(io)?;
        let text = String::from_utf8_lossy(&raw);
        let body = match text.find("\n\n") {
            Some(i) => text[i + 2..].to_string(),
            None => String::new(),
        };
        posts.push(Post {
            group: parts[1].to_string(),
            split,
            number,
            text: body,
        });
    }
    posts.sort_by(|a, b| (&a.group, a.number, &a.split).cmp(&(&b.group, b.number, &b.split)));
    Ok(posts)
}

/// Every post with at least one term as a document memory's vector would hold it: TF-IDF over
/// the whole corpus (the default tokenizer, a vocabulary that keeps every term), as (term key,
/// weight) pairs, in post order.
pub fn keyed_vectors(posts: &[Post]) -> Vec<Vec<(u64, f64)>> {
    let tok = novad_models::Params::default().tokenizer();
    let tokens: Vec<Vec<String>> = posts.iter().map(|p| tok.tokens(&p.text)).collect();
    let mut vocab = Vocabulary::new(10_000_000);
    let (counts, _) = vocab.observe(&tokens, 0);
    counts
        .iter()
        .map(|c| {
            let d = tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen());
            d.ids
                .iter()
                .zip(&d.vals)
                .map(|(&id, &v)| (term_key(vocab.term(id)), v))
                .collect()
        })
        .filter(|v: &Vec<(u64, f64)>| !v.is_empty())
        .collect()
}

/// Copy `c` of a vector of [`keyed_vectors`]: every term whose (key, c) hash falls in the
/// lowest fifth is replaced by a copy-specific term, so copies are near, not exact,
/// duplicates and a stream of them keeps bringing new terms. Copy 0 is the vector itself.
pub fn near_copy(base: &[(u64, f64)], c: u64) -> TermVector {
    TermVector::from_pairs(
        base.iter()
            .map(|&(k, w)| {
                let h =
                    (k ^ c.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                if c > 0 && h % 5 == 0 {
                    (h, w)
                } else {
                    (k, w)
                }
            })
            .collect(),
    )
}
