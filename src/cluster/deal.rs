//! Who works out what in a step: the hands of the 64 logical shards dealt to the workers
//! of a cluster for the tokenising, the coding, the search and the update's rows. Every hand
//! is a pure function of values every worker has (the job's predicted costs, the number of
//! workers), so every worker deals the same hands; no output depends on them. Work that is
//! stolen ([`super::pool`]) starts from these hands; work that is not (the search's
//! documents, the update's rows) is dealt with a lighter hand for a worker that has other
//! work in the step ([`deal_lighter`]).

use novad_models::l1::dictionary::{deal, deal_after, UpdateJob, LOGICAL_SHARDS};
use novad_models::l1::replicate::CodingJob;

use super::protocol::{finder, LeadTerms};

/// The logical shards dealt out to `peers` workers by `costs` ([`deal_after`]) when some
/// have other work to do besides: worker w of `extra` (w, h) has work worth h halves of one
/// worker's share (the total cost over the workers), so its hand is that much lighter and
/// every worker's total comes out even. Entries for workers beyond `peers` are ignored; a
/// worker alone takes every shard.
fn deal_lighter(
    costs: &[u64; LOGICAL_SHARDS],
    peers: usize,
    extra: &[(usize, u64)],
) -> Vec<Vec<usize>> {
    let mut before = vec![0u64; peers.max(1)];
    if peers > 1 {
        let share = costs.iter().sum::<u64>() / peers as u64;
        for &(w, halves) in extra {
            if let Some(b) = before.get_mut(w) {
                *b = b.saturating_add(share.saturating_mul(halves) / 2);
            }
        }
    }
    deal_after(costs, &before)
}

/// The logical shards of worker `index` of `peers`: it searches the memory for their batch
/// documents. The leader's other work in a step (the last timestep's commit, the next file,
/// the judgement) counts as one worker's share of the search ([`deal_lighter`], one unit of
/// cost per shard), so it searches for fewer documents than a replica; the same hands on
/// every worker. (The coding, with which the search shares its rounds, is work-stolen: a
/// worker with less to search codes more, see [`super::pool`].)
pub(super) fn my_shards(index: usize, peers: usize) -> Vec<usize> {
    let mut hands = deal_lighter(&[1; LOGICAL_SHARDS], peers, &[(0, 2)]);
    if index < hands.len() {
        hands.swap_remove(index)
    } else {
        Vec::new()
    }
}

/// Every worker's hand of logical shards to code in the step of `job` (of `peers` workers):
/// dealt out by their predicted coding cost ([`CodingJob::shard_costs`], [`deal`]), so that
/// the workers finish their coding at about the same time whatever documents the batch puts
/// in which shard (work stealing evens out the rest, [`super::pool`]). Every worker deals the
/// same hands from the same job; which worker codes a shard does not change its codes.
pub(super) fn coding_deal(job: &CodingJob<'_>, peers: usize) -> Vec<Vec<usize>> {
    deal(&job.shard_costs(), peers)
}

/// Every worker's hand of the logical shards of Â's rows whose gradient rows it computes in
/// the update of `job` (of `peers` workers), dealt out by their predicted cost
/// ([`UpdateJob::shard_costs`], [`deal_lighter`]): the leader's other work in a step (the last
/// timestep's commit, the next file, the judgement, the events) counts as one worker's share,
/// and so does the finder's ([`finder`]: the plan of the step's atom refresh, which it works
/// out before its rows — each step with the default parameters), so they compute fewer rows
/// than the other replicas. The same hands on every worker.
pub(super) fn row_deal(job: &UpdateJob<'_>, peers: usize) -> Vec<Vec<usize>> {
    deal_lighter(&job.shard_costs(), peers, &[(0, 2), (finder(peers), 2)])
}

/// Every worker's logical shards to tokenise of a batch whose shards' texts have these bytes
/// ([`TermJob::shard_costs`](novad_models::l1::replicate::TermJob::shard_costs)), dealt out
/// evenly ([`deal_lighter`]) but for the leader's other work meanwhile (see
/// [`crate::ingest::Replicas::step`]), which counts as `lead`: with [`LeadTerms::Less`] it takes a quarter of the batch with one replica, with
/// [`LeadTerms::Little`] an eighth. Work stealing evens out the rest ([`super::pool`]).
pub(super) fn term_deal(
    costs: &[u64; LOGICAL_SHARDS],
    peers: usize,
    lead: LeadTerms,
) -> Vec<Vec<usize>> {
    let halves = match lead {
        LeadTerms::Share => 0,
        LeadTerms::Less => 2,
        LeadTerms::Little => 3,
    };
    deal_lighter(costs, peers, &[(0, halves)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dealt with other work worth h halves of a share, the leader's hand and that work come
    /// out even with a replica's hand (within the largest shard), every shard dealt once; a
    /// second worker with other work gets a lighter hand too.
    #[test]
    fn a_worker_with_other_work_gets_a_lighter_hand() {
        // uneven costs: shard s costs 50 + s
        let costs: [u64; LOGICAL_SHARDS] = std::array::from_fn(|s| 50 + s as u64);
        let total: u64 = costs.iter().sum();
        for peers in 2..=6 {
            for halves in 0..=3 {
                let hands = deal_lighter(&costs, peers, &[(0, halves)]);
                let mut all: Vec<usize> = hands.concat();
                all.sort_unstable();
                assert_eq!(all, (0..LOGICAL_SHARDS).collect::<Vec<_>>());
                let load = |w: usize| hands[w].iter().map(|&s| costs[s]).sum::<u64>();
                let before = total / peers as u64 * halves / 2;
                let biggest = *costs.iter().max().unwrap();
                for w in 1..peers {
                    let (lead, other) = (before + load(0), load(w));
                    // a leader whose other work outweighs a share gets nothing at all
                    if load(0) > 0 {
                        assert!(lead.abs_diff(other) <= biggest, "{peers} {halves}: {w}");
                    } else {
                        assert!(other <= lead + biggest, "{peers} {halves}: {w}");
                    }
                }
                if halves > 0 {
                    assert!(load(0) < load(1), "{peers} {halves}");
                }
            }
        }
        let one = deal_lighter(&costs, 1, &[(0, 3), (1, 2)]);
        assert_eq!(one, vec![(0..LOGICAL_SHARDS).collect::<Vec<_>>()]);
        for peers in 3..=6 {
            let hands = deal_lighter(&costs, peers, &[(0, 2), (peers - 1, 2), (peers, 9)]);
            let load = |w: usize| hands[w].iter().map(|&s| costs[s]).sum::<u64>();
            assert_eq!(hands.concat().len(), LOGICAL_SHARDS);
            assert!(load(peers - 1) < load(1), "{peers}");
            assert!(load(0).abs_diff(load(peers - 1)) <= 2 * costs[LOGICAL_SHARDS - 1]);
        }
    }

    /// The leader's part of the tokenising shrinks with its other work: with one replica and
    /// even shards, a half, a quarter, an eighth; every shard is dealt once; a leader alone
    /// takes them all; two replicas leave a leader with `Little` to do nothing.
    #[test]
    fn the_leaders_part_of_the_tokenising_follows_its_other_work() {
        let costs = [100u64; LOGICAL_SHARDS];
        let share = |peers, lead| {
            let hands = term_deal(&costs, peers, lead);
            let mut all: Vec<usize> = hands.concat();
            all.sort_unstable();
            assert_eq!(all, (0..LOGICAL_SHARDS).collect::<Vec<_>>(), "{lead:?}");
            hands[0].len()
        };
        assert_eq!(share(2, LeadTerms::Share), LOGICAL_SHARDS / 2);
        assert_eq!(share(2, LeadTerms::Less), LOGICAL_SHARDS / 4);
        assert_eq!(share(2, LeadTerms::Little), LOGICAL_SHARDS / 8);
        for lead in [LeadTerms::Share, LeadTerms::Less, LeadTerms::Little] {
            assert_eq!(share(1, lead), LOGICAL_SHARDS);
        }
        assert_eq!(share(3, LeadTerms::Little), 0);
    }
}
