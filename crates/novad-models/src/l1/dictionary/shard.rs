//! Logical shards of a batch: the unit in which the coding of a batch is shared out.
//!
//! The documents of a batch are split into [`LOGICAL_SHARDS`] fixed logical shards: document
//! `j` (its position in the batch) belongs to shard `j % LOGICAL_SHARDS`, and inside a shard
//! documents keep their batch order. A document's code is a function of the document and Â_t
//! only, so a shard can be coded anywhere ([`crate::l1::replicate`]); every other part of the
//! step, the OIADMM update included, runs on the codes of the whole batch in batch order,
//! row by row (rows are independent, each summed in a fixed order). The result is therefore
//! the same whatever rayon's thread count and however many processes code the shards.

/// The fixed number of logical shards a batch is split into (see the module docs): also the
/// most workers that can share the coding of a batch.
pub const LOGICAL_SHARDS: usize = 64;

/// The logical shard of the document at position `j` of a batch.
pub fn shard_of(j: usize) -> usize {
    j % LOGICAL_SHARDS
}

/// Positions (in batch order) of the documents of shard `s` in a batch of `n` documents.
pub fn shard_docs(n: usize, s: usize) -> impl Iterator<Item = usize> {
    (s..n).step_by(LOGICAL_SHARDS)
}
