//! Logical shards of a batch: the unit in which the tokenising and the coding of a batch are
//! shared out.
//!
//! The documents of a batch are split into [`LOGICAL_SHARDS`] fixed logical shards: document
//! `j` (its position in the batch) belongs to shard `j % LOGICAL_SHARDS`, and inside a shard
//! documents keep their batch order. A document's resolved terms are a function of the
//! document and the vocabulary before the batch only, its code of its vector and Â_t only,
//! so a shard can be tokenised and coded anywhere ([`crate::l1::replicate`]); every other part
//! of the step, the vocabulary's update and the OIADMM update included, runs on the whole
//! batch in batch order, row by row (rows are independent, each summed in a fixed order). The
//! result is therefore the same whatever rayon's thread count and however many processes
//! tokenise and code the shards.

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

/// `f` run once on the positions of the documents of `shards` (of a batch of `n`: shard by
/// shard, each in batch order), its values cut back into one list per shard, in `shards`
/// order. `f` returns one value per position it is given.
pub fn per_shard<T>(
    n: usize,
    shards: &[usize],
    f: impl FnOnce(&[usize]) -> Vec<T>,
) -> Vec<(usize, Vec<T>)> {
    let at: Vec<usize> = shards.iter().flat_map(|&s| shard_docs(n, s)).collect();
    let mut values = f(&at).into_iter();
    shards
        .iter()
        .map(|&s| (s, values.by_ref().take(shard_docs(n, s).count()).collect()))
        .collect()
}

/// The logical shards dealt out to `peers` workers so that their summed `costs` (one per
/// logical shard, in any unit) come out even: [`deal_after`] with no work before.
pub fn deal(costs: &[u64; LOGICAL_SHARDS], peers: usize) -> Vec<Vec<usize>> {
    deal_after(costs, &vec![0; peers.max(1)])
}

/// The logical shards dealt out to workers that have `before[i]` of other work to do first
/// (in the unit of `costs`, one cost per logical shard), so that every worker's total comes
/// out even: the longest-processing-time rule (shards by decreasing cost, ties by shard
/// number, each to the worker with the least total so far, ties to the lowest index). A
/// worker that gets any shard ends at most the largest shard's cost above the least loaded
/// worker. Worker i's shards are `deal_after(..)[i]`, increasing. A pure function of its
/// arguments, so every worker deals the same hand from the same costs. At least one worker.
pub fn deal_after(costs: &[u64; LOGICAL_SHARDS], before: &[u64]) -> Vec<Vec<usize>> {
    let mut load: Vec<u64> = if before.is_empty() {
        vec![0]
    } else {
        before.to_vec()
    };
    let mut order: Vec<usize> = (0..LOGICAL_SHARDS).collect();
    order.sort_by_key(|&s| (std::cmp::Reverse(costs[s]), s));
    let mut hands = vec![Vec::new(); load.len()];
    for s in order {
        let w = (0..load.len()).min_by_key(|&w| (load[w], w)).unwrap_or(0);
        load[w] = load[w].saturating_add(costs[s]);
        hands[w].push(s);
    }
    for h in &mut hands {
        h.sort_unstable();
    }
    hands
}

/// Why lists by shard do not make up a batch (the shard named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardGap {
    /// No such shard (≥ [`LOGICAL_SHARDS`]).
    Unknown(usize),
    Twice(usize),
    Missing(usize),
    /// Not one value per document of the shard.
    Count(usize),
}

/// One value per document of a batch of `n`, in batch order, from lists by shard (as
/// [`per_shard`] makes them): every logical shard exactly once, with one value per document
/// of the shard.
pub fn by_position<T>(
    n: usize,
    parts: impl IntoIterator<Item = (usize, Vec<T>)>,
) -> Result<Vec<T>, ShardGap> {
    let mut slots: Vec<Option<Vec<T>>> = (0..LOGICAL_SHARDS).map(|_| None).collect();
    for (s, values) in parts {
        let slot = slots.get_mut(s).ok_or(ShardGap::Unknown(s))?;
        if slot.is_some() {
            return Err(ShardGap::Twice(s));
        }
        *slot = Some(values);
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for (s, slot) in slots.into_iter().enumerate() {
        let values = slot.ok_or(ShardGap::Missing(s))?;
        if values.len() != shard_docs(n, s).count() {
            return Err(ShardGap::Count(s));
        }
        for (j, v) in shard_docs(n, s).zip(values) {
            out[j] = Some(v);
        }
    }
    Ok(out
        .into_iter()
        .map(|v| v.expect("every position is in one shard"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_cut_by_shard_come_back_in_batch_order() {
        for n in [0, 1, 63, 64, 65, 200] {
            // two workers' halves, each computed in one call on its positions
            let even: Vec<usize> = (0..LOGICAL_SHARDS).step_by(2).collect();
            let odd: Vec<usize> = (1..LOGICAL_SHARDS).step_by(2).collect();
            let mut parts = per_shard(n, &odd, |at| at.iter().map(|&j| j * 10).collect());
            parts.extend(per_shard(n, &even, |at| {
                at.iter().map(|&j| j * 10).collect()
            }));
            let all = by_position(n, parts).unwrap();
            assert_eq!(all, (0..n).map(|j| j * 10).collect::<Vec<_>>(), "{n}");
        }
    }

    #[test]
    fn a_deal_gives_every_shard_once_and_evens_out_the_costs() {
        let mut st = 0x5eed_u64;
        for round in 0..200 {
            // costs from flat to heavy-tailed, some shards empty
            let costs: [u64; LOGICAL_SHARDS] = std::array::from_fn(|_| {
                st = st
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = st >> 33;
                match round % 3 {
                    0 => r % 1000,
                    1 => (r % 100).pow(3),
                    _ => (r % 7 == 0) as u64 * (r % 50_000),
                }
            });
            for peers in 1..=5 {
                let hands = deal(&costs, peers);
                assert_eq!(hands.len(), peers);
                let mut all: Vec<usize> = hands.concat();
                all.sort_unstable();
                assert_eq!(all, (0..LOGICAL_SHARDS).collect::<Vec<_>>());
                for h in &hands {
                    assert!(h.windows(2).all(|w| w[0] < w[1]), "increasing");
                }
                let loads: Vec<u64> = hands
                    .iter()
                    .map(|h| h.iter().map(|&s| costs[s]).sum())
                    .collect();
                let (hi, lo) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
                let biggest = *costs.iter().max().unwrap();
                assert!(hi - lo <= biggest, "{loads:?}, largest shard {biggest}");
                assert_eq!(deal(&costs, peers), hands, "the same hand every time");
            }
        }
        // equal costs: the shards are dealt round-robin-like, 32 each
        let hands = deal(&[5; LOGICAL_SHARDS], 2);
        assert_eq!((hands[0].len(), hands[1].len()), (32, 32));
    }

    #[test]
    fn a_deal_after_other_work_evens_out_the_totals() {
        let costs: [u64; LOGICAL_SHARDS] = std::array::from_fn(|s| 10 + (s as u64 * 37) % 90);
        let total: u64 = costs.iter().sum();
        for before in [vec![total / 2, 0], vec![total / 3, 0, 0], vec![0, 500, 900]] {
            let hands = deal_after(&costs, &before);
            let mut all: Vec<usize> = hands.concat();
            all.sort_unstable();
            assert_eq!(all, (0..LOGICAL_SHARDS).collect::<Vec<_>>());
            let totals: Vec<u64> = hands
                .iter()
                .zip(&before)
                .map(|(h, b)| b + h.iter().map(|&s| costs[s]).sum::<u64>())
                .collect();
            let lo = *totals.iter().min().unwrap();
            for (h, t) in hands.iter().zip(&totals) {
                if !h.is_empty() {
                    assert!(t - lo <= 99, "{totals:?}");
                }
            }
        }
        // a worker with more work before than all the shards together gets none
        let hands = deal_after(&costs, &[total + 1, 0]);
        assert!(hands[0].is_empty());
        assert_eq!(hands[1].len(), LOGICAL_SHARDS);
        // with half a worker's share to do first, the leader of two takes about a quarter
        let hands = deal_after(&costs, &[total / 2, 0]);
        let lead: u64 = hands[0].iter().map(|&s| costs[s]).sum();
        assert!(lead.abs_diff(total / 4) <= 99, "{lead} of {total}");
    }

    #[test]
    fn a_shard_unknown_repeated_missing_or_short_is_named() {
        let n = 130;
        let whole = || {
            per_shard(n, &(0..LOGICAL_SHARDS).collect::<Vec<_>>(), |at| {
                at.to_vec()
            })
        };
        let mut p = whole();
        p.push((LOGICAL_SHARDS, vec![]));
        assert_eq!(by_position(n, p), Err(ShardGap::Unknown(LOGICAL_SHARDS)));
        let mut p = whole();
        p.push(p[5].clone());
        assert_eq!(by_position(n, p), Err(ShardGap::Twice(5)));
        let mut p = whole();
        p.remove(7);
        assert_eq!(by_position(n, p), Err(ShardGap::Missing(7)));
        let mut p = whole();
        p[3].1.pop();
        assert_eq!(by_position(n, p), Err(ShardGap::Count(3)));
    }
}
