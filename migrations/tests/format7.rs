//! The migration to format 8 on a store written by a format-4 release
//! (`tests/fixtures/store-format4-l1` of the workspace, first brought to format 7): every
//! timestep gets the summary of its verdicts, nothing else changes, and a second run changes
//! nothing.

mod common;

use common::{dump, format4_fixture, step_from};
use novad_migrations::schema::{
    u64_key, StepSummary, TimestepRecord, VerdictRecord, SUMMARIES, TIMESTEPS, VERDICTS,
};

#[test]
fn format_7_to_8_summarizes_every_timestep_from_its_verdicts_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let db = format4_fixture(tmp.path());
    for from in 4..7 {
        (step_from(from).apply)(&db).unwrap();
    }
    let before = dump(&db);
    assert!(before[SUMMARIES].is_empty(), "a format-7 store");
    (step_from(7).apply)(&db).unwrap();
    let once = dump(&db);
    for (t, kv) in &before {
        if t != SUMMARIES {
            assert_eq!(&once[t], kv, "{t} untouched");
        }
    }
    // the oracle: each timestep's verdicts, gathered by a full read of the verdict tree
    let verdicts: Vec<VerdictRecord> = once[VERDICTS]
        .iter()
        .map(|(_, v)| novad_migrations::schema::decode_verdict(v, 1).unwrap())
        .collect();
    let steps: Vec<TimestepRecord> = once[TIMESTEPS]
        .iter()
        .map(|(_, v)| postcard::from_bytes(v).unwrap())
        .collect();
    assert!(
        steps.len() >= 2 && !verdicts.is_empty(),
        "the fixture has data"
    );
    assert_eq!(
        once[SUMMARIES].len(),
        steps.len(),
        "one summary per timestep"
    );
    for (s, (k, v)) in steps.iter().zip(&once[SUMMARIES]) {
        assert_eq!(k.as_slice(), u64_key(s.timestep).as_slice());
        let got: StepSummary = postcard::from_bytes(v).unwrap();
        let mine: Vec<&VerdictRecord> = verdicts
            .iter()
            .filter(|v| v.timestep == s.timestep)
            .collect();
        assert_eq!(got.docs, mine.len() as u64, "timestep {}", s.timestep);
        assert_eq!(got.docs, s.stats.docs as u64, "timestep {}", s.timestep);
        assert_eq!(
            got.novel,
            mine.iter().filter(|v| v.novel).count() as u64,
            "timestep {}",
            s.timestep
        );
        assert_eq!(got.first_time, mine.iter().map(|v| v.time).min());
        assert_eq!(got.last_time, mine.iter().map(|v| v.time).max());
        let mut scored: Vec<f64> = mine
            .iter()
            .filter(|v| !v.empty && !v.bootstrap && v.score.is_finite())
            .map(|v| v.score)
            .collect();
        scored.sort_by(f64::total_cmp);
        match got.scores {
            None => assert!(scored.is_empty(), "timestep {}", s.timestep),
            Some(q) => {
                assert_eq!(q.max, *scored.last().unwrap());
                let order = [q.p10, q.p25, q.p50, q.p75, q.p90, q.max];
                assert!(order.windows(2).all(|w| w[0] <= w[1]), "{q:?}");
                assert!(q.p10 >= scored[0]);
            }
        }
    }
    (step_from(7).apply)(&db).unwrap();
    assert_eq!(dump(&db), once, "a second run changes nothing");
}
