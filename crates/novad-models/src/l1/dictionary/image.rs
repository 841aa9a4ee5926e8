//! The stored image of a dictionary Â (the ℓ1 model's `dict` state part).
//!
//! Â lies in 𝒜 (non-negative columns of ℓ1 norm ≤ 1) and the column projection thresholds
//! small entries to zero, so on text it is well under 1 % dense (measured on 20 Newsgroups:
//! 117,007 non-zero entries of 90,000 × 200 after 12,000 posts). The image is therefore
//! row-compressed: per row the count of stored entries, then the atom indices (ascending,
//! as gaps) and their `f32` values bit for bit. A timestep then rewrites about a megabyte
//! instead of the dense matrix's tens of megabytes.
//!
//! Two versions are read, told apart by the first byte:
//! - `1`: the dense image (`ndarray`'s serde form: version byte 1, shape, every entry), which
//!   stores written before the compressed image hold; it is read as is and replaced by the
//!   compressed image at the store's next commit.
//! - `2`: the compressed image, which is what [`encode`] writes.
//!
//! Both decode to the same matrix bit for bit, so the model digest (computed from the matrix,
//! not from this image) does not depend on the version a store holds.

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use super::Dictionary;

/// First byte of the compressed image.
const COMPRESSED: u8 = 2;
/// First byte of `ndarray`'s serde image (its format version).
const DENSE: u8 = 1;

#[derive(Clone, Serialize, Deserialize)]
struct Compressed {
    version: u8,
    rows: u64,
    cols: u64,
    /// Stored entries per row.
    row_len: Vec<u32>,
    /// Per stored entry: its column minus the previous stored column of the row plus one
    /// (the first of a row: its column), so every gap is ≥ 1 and small.
    gaps: Vec<u32>,
    /// Per stored entry: its value.
    values: Vec<f32>,
}

/// The compressed image of `a`: O(m + non-zeros). Every stored entry (every entry whose bit
/// pattern is not `+0.0`) is written, so [`decode`] returns `a` bit for bit (including a
/// `-0.0` or a non-finite value, which the model's own checks reject elsewhere).
pub fn encode(a: &Dictionary) -> Vec<u8> {
    let (m, k) = a.dim();
    let mut img = Compressed {
        version: COMPRESSED,
        rows: m as u64,
        cols: k as u64,
        row_len: Vec::with_capacity(m),
        gaps: Vec::with_capacity(a.nnz()),
        values: Vec::with_capacity(a.nnz()),
    };
    for i in 0..m {
        let row = a.row(i);
        let mut prev: Option<u32> = None;
        for &(j, v) in row {
            img.gaps.push(prev.map_or(j, |p| j - p));
            img.values.push(v);
            prev = Some(j);
        }
        img.row_len.push(row.len() as u32);
    }
    postcard::to_stdvec(&img).expect("a dictionary image serialises")
}

/// The dictionary of an image written by [`encode`] or by the dense encoding. Errors say what
/// is inconsistent (shape, counts, an atom index out of range or out of order).
pub fn decode(bytes: &[u8]) -> Result<Dictionary, String> {
    match bytes.first() {
        Some(&DENSE) => postcard::from_bytes::<Array2<f32>>(bytes)
            .map_err(|e| e.to_string())
            .and_then(|a| Dictionary::try_from_dense(a.view())),
        Some(&COMPRESSED) => {
            let img: Compressed = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
            from_compressed(img)
        }
        Some(v) => Err(format!("unknown dictionary image version {v}")),
        None => Err("empty dictionary image".into()),
    }
}

fn from_compressed(img: Compressed) -> Result<Dictionary, String> {
    let (m, k) = (img.rows as usize, img.cols as usize);
    if img.row_len.len() != m {
        return Err(format!("{} row counts for {m} rows", img.row_len.len()));
    }
    let total: u64 = img.row_len.iter().map(|&l| l as u64).sum();
    if total != img.gaps.len() as u64 || total != img.values.len() as u64 {
        return Err(format!(
            "{total} entries counted, {} indices and {} values stored",
            img.gaps.len(),
            img.values.len()
        ));
    }
    if k > u32::MAX as usize {
        return Err(format!("{k} atoms is too many"));
    }
    let mut out = Dictionary::zeros(0, k);
    let mut at = 0usize;
    for (i, &len) in img.row_len.iter().enumerate() {
        let mut col: Option<usize> = None;
        let mut row = Vec::with_capacity(len as usize);
        for _ in 0..len {
            let gap = img.gaps[at] as usize;
            let j = match col {
                None => gap,
                Some(_) if gap == 0 => return Err(format!("row {i}: atom indices not ascending")),
                Some(p) => p + gap,
            };
            if j >= k {
                return Err(format!("row {i}: atom {j} of {k}"));
            }
            row.push((j as u32, img.values[at]));
            col = Some(j);
            at += 1;
        }
        out.push_row(row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Array2<f32> {
        let mut a = Array2::<f32>::zeros((7, 5));
        a[[0, 0]] = 0.25;
        a[[0, 4]] = 1e-30;
        a[[3, 2]] = 0.5;
        a[[3, 3]] = -0.0;
        a[[6, 1]] = f32::MIN_POSITIVE;
        a
    }

    fn bits(a: &Array2<f32>) -> Vec<u32> {
        a.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn both_images_decode_to_the_matrix_bit_for_bit() {
        let a = sample();
        let dense = postcard::to_stdvec(&a).unwrap();
        assert_eq!(dense[0], DENSE, "ndarray's image starts with its version");
        for img in [encode(&Dictionary::from_dense(a.view())), dense] {
            let back = decode(&img).unwrap();
            assert_eq!(back.dim(), a.dim());
            assert_eq!(bits(&back.to_dense()), bits(&a));
        }
        let empty = Dictionary::zeros(0, 3);
        assert_eq!(decode(&encode(&empty)).unwrap().dim(), (0, 3));
    }

    #[test]
    fn the_compressed_image_grows_with_the_entries_not_the_shape() {
        let mut a = Array2::<f32>::zeros((20_000, 200));
        for i in (0..20_000).step_by(100) {
            a[[i, i % 200]] = 0.01;
        }
        let img = encode(&Dictionary::from_dense(a.view()));
        // 200 entries of one gap byte and four value bytes, one byte per row, a small header
        assert!(img.len() < 20_000 + 200 * 7 + 16, "{} bytes", img.len());
        assert_eq!(decode(&img).unwrap().to_dense(), a);
    }

    #[test]
    fn inconsistent_images_are_refused_with_what_is_wrong() {
        let good = Compressed {
            version: COMPRESSED,
            rows: 2,
            cols: 3,
            row_len: vec![2, 0],
            gaps: vec![0, 2],
            values: vec![0.5, 0.25],
        };
        let enc = |f: &dyn Fn(&mut Compressed)| {
            let mut c = good.clone();
            f(&mut c);
            postcard::to_stdvec(&c).unwrap()
        };
        let ok = decode(&enc(&|_| {})).unwrap();
        assert_eq!((ok.get(0, 0), ok.get(0, 2)), (0.5, 0.25));
        type Case<'a> = (&'a dyn Fn(&mut Compressed), &'a str);
        let cases: [Case; 4] = [
            (&|c| c.gaps[1] = 3, "atom 3 of 3"),
            (&|c| c.gaps[1] = 0, "not ascending"),
            (&|c| c.row_len = vec![2], "row counts"),
            (&|c| c.values.truncate(1), "values stored"),
        ];
        for (f, want) in cases {
            let err = decode(&enc(f)).unwrap_err();
            assert!(err.contains(want), "{err} should say {want}");
        }
        assert!(decode(&[9, 0]).unwrap_err().contains("version 9"));
        // a dense image of 2⁴⁰ rows and no atoms is a few bytes: refused, not allocated
        let huge =
            postcard::to_stdvec(&(DENSE, [1usize << 40, 0usize], Vec::<f32>::new())).unwrap();
        assert!(decode(&huge).unwrap_err().contains("no atoms"));
        assert!(decode(&[]).is_err());
        let mut cut = encode(&Dictionary::from_dense(sample().view()));
        cut.truncate(cut.len() - 3);
        assert!(decode(&cut).is_err(), "a truncated image");
    }
}
