//! Who works out what in a step: the hands of the 64 logical shards dealt to the workers
//! of a cluster for the tokenising, the coding, the search and the update's rows. Every hand
//! is a pure function of values every worker has (the job's predicted costs, the number of
//! workers, the step's [`Burdens`]), so every worker deals the same hands; no output depends
//! on them. Work that is stolen ([`super::pool`]) starts from these hands; work that is not
//! (the search's documents, the update's rows) is dealt with a lighter hand for a worker that
//! has other work in the step ([`deal_lighter`]), that work weighed as a part of the whole
//! batch's cost: fixed parts — the leader's a fixed amount, so a fixed part, as heavy with two
//! workers as with eight; the finder's half of one worker's share — and, on top of them, what the
//! leader measured of each worker's other work ([`super::balance`]).

use serde::{Deserialize, Serialize};

use novad_models::l1::dictionary::{deal, deal_after, UpdateJob, LOGICAL_SHARDS};
use novad_models::l1::replicate::CodingJob;

use super::protocol::{finder, LeadTerms};

/// The unit of [`Burdens`]: a burden of `BURDEN_UNIT` is as much other work as the whole of a
/// step's work dealt without stealing (the search's documents and the update's rows).
pub(super) const BURDEN_UNIT: u32 = 1 << 12;

/// Each worker's other work in a step beyond what the fixed parts ([`LEADER_WORK`],
/// [`finder_work`]) count for it — everything but the search's documents and the update's
/// rows, which are dealt without stealing — as a part of those (in [`BURDEN_UNIT`]s), by
/// worker; only the differences between workers count. Measured by the leader
/// ([`super::balance::Balance`]) and sent with each step ([`super::protocol::Lead::Step`]),
/// so that every worker deals the same hands. `None`: not measured yet, the fixed parts
/// alone. A worker past the end of the list has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Burdens(pub Option<Vec<u32>>);

impl Burdens {
    /// The other work of `peers` workers as parts of the dealt work: the `fixed` parts and
    /// the measured burdens on top.
    fn parts(&self, peers: usize, fixed: &[(usize, Part)]) -> Vec<(usize, Part)> {
        let unit = BURDEN_UNIT as u64;
        let mut parts: Vec<(usize, Part)> = fixed.to_vec();
        if let Some(b) = &self.0 {
            parts.extend(
                b.iter()
                    .take(peers)
                    .enumerate()
                    .map(|(w, &n)| (w, Part(n as u64, unit))),
            );
        }
        parts
    }
}

/// The finer unit [`deal_lighter`] counts costs in: 1/FINE of theirs.
const FINE: u64 = 1 << 12;

/// A part of a batch's whole cost (of every shard together): `Part(n, d)` is n/d of it.
#[derive(Debug, Clone, Copy)]
struct Part(u64, u64);

/// The logical shards dealt out to `peers` workers by `costs` ([`deal_after`]) when some
/// have other work to do besides: worker w of `extra` (w, p) has work worth the part p of
/// the whole batch's cost, so its hand is that much lighter — none at all when that work
/// reaches what the others end at — and every worker's total comes out even. Entries for
/// workers beyond `peers` are ignored; a worker alone takes every shard.
fn deal_lighter(
    costs: &[u64; LOGICAL_SHARDS],
    peers: usize,
    extra: &[(usize, Part)],
) -> Vec<Vec<usize>> {
    let mut before = vec![0u64; peers.max(1)];
    if peers > 1 {
        // in 1/FINE of the costs' unit, so that a part of a cheap batch (the search: one
        // unit a shard) is not rounded down to whole shards
        let costs = costs.map(|c| c.saturating_mul(FINE));
        let total = costs.iter().fold(0u64, |a, &c| a.saturating_add(c));
        for &(w, Part(n, d)) in extra {
            if let Some(b) = before.get_mut(w) {
                let part = total as u128 * n as u128 / d.max(1) as u128;
                *b = b.saturating_add(u64::try_from(part).unwrap_or(u64::MAX));
            }
        }
        return deal_after(&costs, &before);
    }
    deal_after(costs, &before)
}

/// The leader's other work in a step (the last timestep's records and commit, its store's
/// committer thread, the events, reading the next file, the judgement): a fixed amount, so a
/// fixed part of a batch's search and, apart from it, of the update's rows, half of each.
/// Set where the leader's CPU per step comes out level with the replicas' with two and with
/// four processes (`bench_cluster`, docs/RESULTS.md, "Several processes"): with two
/// processes this is one worker's share, with four it leaves the leader no search and next
/// to no rows.
const LEADER_WORK: Part = Part(1, 2);

/// The finder's other work ([`finder`]: the plan of the step's atom refresh; with two
/// processes it is also the replica that tokenises most of a batch sent ahead) as a part of
/// the update's rows: half of one worker's share. The plan's k-means ends at its fixed point
/// (on 20NG after its second iteration): with one worker's share, four processes left the
/// finder the lightest by 0.008–0.011 CPU s a step of ~0.13 (`bench_cluster`, docs/RESULTS.md,
/// "Several processes"), about half of that share.
fn finder_work(peers: usize) -> Part {
    Part(1, 2 * peers.max(1) as u64)
}

/// The fixed parts of the search, the larger of the two dealt works, as burdens of `peers`
/// workers (in parts of the dealt work, by worker): the leader's [`LEADER_WORK`]. Where the
/// measured burdens stop growing is worked out over them ([`super::balance::Balance`]).
pub(super) fn fixed_burdens(peers: usize) -> Vec<f64> {
    let mut b = vec![0.0; peers];
    if let Some(lead) = b.first_mut().filter(|_| peers > 1) {
        let Part(n, d) = LEADER_WORK;
        *lead = n as f64 / d as f64;
    }
    b
}

/// The logical shards of worker `index` of `peers`: it searches the memory for their batch
/// documents. The leader's other work in the step counts as half of the search
/// ([`LEADER_WORK`], [`deal_lighter`], one unit of cost per shard), and each worker's
/// measured `burdens` on top, so the leader searches for fewer documents than a replica,
/// unmeasured from three workers on for none. The same hands on every worker. (The coding, with which the search shares its
/// rounds, is work-stolen: a worker with less to search codes more, see [`super::pool`].)
pub(super) fn my_shards(index: usize, peers: usize, burdens: &Burdens) -> Vec<usize> {
    let extra = burdens.parts(peers, &[(0, LEADER_WORK)]);
    let mut hands = deal_lighter(&[1; LOGICAL_SHARDS], peers, &extra);
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
/// ([`UpdateJob::shard_costs`], [`deal_lighter`]): the leader's other work in a step counts
/// as half of the rows ([`LEADER_WORK`]) and the finder's ([`finder`]: the plan of the step's
/// atom refresh, which it works out before its rows — each step with the default parameters)
/// as half of one worker's share ([`finder_work`]), each worker's measured `burdens` on top,
/// so they compute fewer rows than the other replicas. The same hands on every worker.
pub(super) fn row_deal(job: &UpdateJob<'_>, peers: usize, burdens: &Burdens) -> Vec<Vec<usize>> {
    let extra = burdens.parts(
        peers,
        &[(0, LEADER_WORK), (finder(peers), finder_work(peers))],
    );
    deal_lighter(&job.shard_costs(), peers, &extra)
}

/// Every worker's logical shards to tokenise of a batch whose shards' texts have these bytes
/// ([`TermJob::shard_costs`](novad_models::l1::replicate::TermJob::shard_costs)), dealt out
/// evenly ([`deal_lighter`]) but for the leader's other work meanwhile (see
/// [`crate::ingest::Replicas::step`]), which counts as `lead`: [`LeadTerms::Less`] as half of
/// the batch's tokenising (with one replica the leader takes a quarter of the batch, with
/// more next to none), [`LeadTerms::Little`] as three quarters (an eighth of the batch with
/// one replica, none with two or more). Work stealing evens out the rest ([`super::pool`]).
pub(super) fn term_deal(
    costs: &[u64; LOGICAL_SHARDS],
    peers: usize,
    lead: LeadTerms,
) -> Vec<Vec<usize>> {
    let part = match lead {
        LeadTerms::Share => Part(0, 1),
        LeadTerms::Less => Part(1, 2),
        LeadTerms::Little => Part(3, 4),
    };
    deal_lighter(costs, peers, &[(0, part)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dealt with other work worth e eighths of the batch, the leader's hand and that work
    /// come out even with a replica's hand (within the largest shard), every shard dealt
    /// once; a second worker with other work gets a lighter hand too; the same other work
    /// leaves the leader no larger a part of the batch the more workers share it.
    #[test]
    fn a_worker_with_other_work_gets_a_lighter_hand() {
        // uneven costs: shard s costs 50 + s
        let costs: [u64; LOGICAL_SHARDS] = std::array::from_fn(|s| 50 + s as u64);
        let total: u64 = costs.iter().sum();
        for eighths in 0..=6 {
            let mut part = u64::MAX;
            for peers in 2..=6 {
                let hands = deal_lighter(&costs, peers, &[(0, Part(eighths, 8))]);
                let mut all: Vec<usize> = hands.concat();
                all.sort_unstable();
                assert_eq!(all, (0..LOGICAL_SHARDS).collect::<Vec<_>>());
                let load = |w: usize| hands[w].iter().map(|&s| costs[s]).sum::<u64>();
                let before = total * eighths / 8;
                let biggest = *costs.iter().max().unwrap();
                for w in 1..peers {
                    let (lead, other) = (before + load(0), load(w));
                    // a leader whose other work reaches what the others end at gets nothing
                    if load(0) > 0 {
                        assert!(lead.abs_diff(other) <= biggest, "{peers} {eighths}: {w}");
                    } else {
                        assert!(other <= lead + biggest, "{peers} {eighths}: {w}");
                    }
                }
                if eighths > 0 {
                    assert!(load(0) < load(1), "{peers} {eighths}");
                    assert!(load(0) <= part, "{peers} {eighths}");
                }
                part = load(0);
            }
        }
        let one = deal_lighter(&costs, 1, &[(0, Part(3, 8)), (1, Part(1, 4))]);
        assert_eq!(one, vec![(0..LOGICAL_SHARDS).collect::<Vec<_>>()]);
        for peers in 3..=6 {
            let share = Part(1, peers as u64);
            let hands = deal_lighter(
                &costs,
                peers,
                &[(0, share), (peers - 1, share), (peers, share)],
            );
            let load = |w: usize| hands[w].iter().map(|&s| costs[s]).sum::<u64>();
            assert_eq!(hands.concat().len(), LOGICAL_SHARDS);
            assert!(load(peers - 1) < load(1), "{peers}");
            assert!(load(0).abs_diff(load(peers - 1)) <= 2 * costs[LOGICAL_SHARDS - 1]);
        }
    }

    /// The leader's other work is a fixed part of the search: with one replica it searches
    /// for a quarter of the batch's shards, with two or more replicas for none;
    /// every shard is searched once.
    #[test]
    fn the_leaders_search_shrinks_as_workers_are_added() {
        let fixed = Burdens(None);
        let hand = |w, peers| my_shards(w, peers, &fixed);
        for peers in 1..=6 {
            let mut all: Vec<usize> = (0..peers).flat_map(|w| hand(w, peers)).collect();
            all.sort_unstable();
            assert_eq!(all, (0..LOGICAL_SHARDS).collect::<Vec<_>>(), "{peers}");
        }
        assert_eq!(hand(0, 1).len(), LOGICAL_SHARDS);
        assert_eq!(hand(0, 2).len(), LOGICAL_SHARDS / 4);
        assert_eq!(hand(1, 2).len(), 3 * LOGICAL_SHARDS / 4);
        for peers in 3..=6 {
            assert!(hand(0, peers).is_empty(), "{peers}");
        }
    }

    /// Measured burdens come on top of the fixed parts: each worker's hand of the search is
    /// lighter by its burden (with four workers, a replica with a quarter of the dealt work
    /// has a quarter of the shards fewer than the others, the leader with its half none),
    /// every shard dealt once; a burden past the workers is ignored and a worker past the list
    /// has none; a worker alone takes all; a part of a shard counts.
    #[test]
    fn measured_burdens_come_on_top_of_the_fixed_parts() {
        let q = BURDEN_UNIT / 4;
        let b = Burdens(Some(vec![0, q, 0, 0, 7 * BURDEN_UNIT]));
        let hands: Vec<usize> = (0..4).map(|w| my_shards(w, 4, &b).len()).collect();
        assert_eq!(hands.iter().sum::<usize>(), LOGICAL_SHARDS);
        assert_eq!(hands[0], 0, "{hands:?}");
        assert!(hands[2].abs_diff(hands[3]) <= 1, "{hands:?}");
        assert!(
            (hands[1] + LOGICAL_SHARDS / 4).abs_diff(hands[2]) <= 1,
            "{hands:?}"
        );
        let short = Burdens(Some(vec![0, q]));
        let hands: Vec<usize> = (0..3).map(|w| my_shards(w, 3, &short).len()).collect();
        assert!(hands[0] < hands[1] && hands[1] < hands[2], "{hands:?}");
        assert_eq!(my_shards(0, 1, &b).len(), LOGICAL_SHARDS);
        // the leader's half and a burden of a shard and a half: counted in fractions of a
        // shard, not rounded down to whole ones (15 of 64, not 16)
        let b = Burdens(Some(vec![3 * BURDEN_UNIT / 128, 0]));
        let hands: Vec<usize> = (0..2).map(|w| my_shards(w, 2, &b).len()).collect();
        assert_eq!(hands, vec![15, 49]);
        // no burden measured: the fixed parts alone
        let zero = Burdens(Some(vec![0, 0]));
        assert_eq!(my_shards(0, 2, &zero), my_shards(0, 2, &Burdens(None)));
    }

    /// The leader's part of the tokenising shrinks with its other work: with one replica and
    /// even shards, a half, a quarter, an eighth; every shard is dealt once; a leader alone
    /// takes them all; two replicas leave a leader with `Little` to do nothing, three one
    /// with `Less`.
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
        assert_eq!(share(4, LeadTerms::Less), 0);
    }
}
