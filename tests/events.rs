//! Emerging topics as events, end to end through the real binary (`novad ingest`, the daemon's
//! code path, default parameters with `--k 20` as the walk-through): the walk-through's
//! eruption is one event holding its eight reports, listed in full by `novad topics --event`,
//! and every report's verdict names it; a later day of the story continues the event under
//! its id; the chatter forms no topic.

#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod common;

use common::{example_batches, novad_ok};

fn lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn the_eruption_is_one_event_that_continues_the_next_day() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store").display().to_string();
    let mut args = vec!["ingest", "--store", store.as_str(), "--k", "20"];
    let files: Vec<String> = example_batches()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    args.extend(files.iter().map(String::as_str));
    novad_ok(&args);

    let topics = lines(&novad_ok(&[
        "topics", "--store", &store, "--format", "jsonl",
    ]));
    assert_eq!(topics.len(), 1, "one topic: {topics:?}");
    let t = &topics[0];
    assert_eq!(t["kind"], "emerging");
    let event = t["event"].as_u64().expect("an event id");
    let members: Vec<&str> = t["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let novel = lines(&novad_ok(&[
        "verdicts", "--store", &store, "--novel", "--format", "jsonl",
    ]));
    let mut flagged: Vec<&str> = novel
        .iter()
        .map(|v| v["doc_id"].as_str().unwrap())
        .collect();
    flagged.sort();
    assert_eq!(members, flagged, "the event holds the flagged reports");
    assert_eq!(members.len(), 8);
    assert!(
        members.iter().all(|m| m.starts_with("2026-03-04-v")),
        "{members:?}"
    );
    let kw: Vec<&str> = t["terms"].as_array().unwrap()[..5]
        .iter()
        .map(|k| k[0].as_str().unwrap())
        .collect();
    assert!(
        kw.contains(&"eruption") && kw.contains(&"volcano"),
        "{kw:?}"
    );
    for v in &novel {
        assert_eq!(v["topic"]["event"].as_u64(), Some(event), "{v}");
    }
    let all = lines(&novad_ok(&[
        "verdicts", "--store", &store, "--format", "jsonl",
    ]));
    let linked = all.iter().filter(|v| !v["topic"].is_null()).count();
    assert_eq!(linked, 8, "only the reports name a topic");

    // a fourth day: more reports of the eruption among the usual chatter
    let day4 = dir.path().join("04-2026-03-05.jsonl");
    let mut body = String::new();
    let chatter = std::fs::read_to_string(&files[1]).unwrap();
    body.push_str(&chatter.replace("2026-03-03", "2026-03-05"));
    for (i, text) in [
        "volcano eruption continues: lava flows and ashfall from the magma plume, seismic alert",
        "ashfall from the volcano plume grounds aviation again as the eruption goes on",
        "magma and lava: seismic stations report the eruption plume rising over the volcano",
    ]
    .iter()
    .enumerate()
    {
        body.push_str(&format!(
            "{{\"id\":\"day4-r{i}\",\"time\":\"2026-03-05T12:0{i}:00Z\",\"text\":\"{text}\"}}\n"
        ));
    }
    std::fs::write(&day4, body).unwrap();
    novad_ok(&["ingest", "--store", &store, &day4.display().to_string()]);
    let later = lines(&novad_ok(&[
        "topics",
        "--store",
        &store,
        "--event",
        &event.to_string(),
        "--format",
        "jsonl",
    ]));
    assert_eq!(later.len(), 2, "two days of the event: {later:?}");
    assert_eq!(later[1]["kind"], "continuing");
    let day4_members: Vec<&str> = later[1]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(day4_members, vec!["day4-r0", "day4-r1", "day4-r2"]);
    let table = novad_ok(&["topics", "--store", &store, "--event", &event.to_string()]);
    assert!(
        table.contains("day4-r2") && table.contains("2026-03-04-v00"),
        "{table}"
    );
}
