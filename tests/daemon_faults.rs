//! The daemon under faults: SIGKILL at random moments, bad input files, old/new/corrupt store
//! versions. Drives the real binary.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::path::Path;
use std::time::Duration;

use novad::store::schema::FORMAT_VERSION;

#[test]
fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    crash_cycles(20, 80, 60, 7);
}

/// Start a daemon, ingest a good file, drop `name`, wait for the rejection note, check it
/// names `expect`, check that a later good file still goes through.
fn rejected_with(name: &str, write: impl FnOnce(&Dirs), expect: &[&str]) {
    let d = Dirs::new();
    let daemon = Daemon::start(&d, &["--k", "20"]);
    d.drop_file(
        "good1.jsonl",
        jsonl_batch(0, 40, "2026-05-01", "g1").as_bytes(),
    );
    wait_for(60, "good1 processed", || {
        files_in(&d.processed()).contains(&"good1.jsonl".to_string())
    });
    write(&d);
    let note = d.rejected().join(format!("{name}.error"));
    wait_for(60, "rejection note and moved file", || {
        note.exists() && d.rejected().join(name).symlink_metadata().is_ok()
    });
    let text = std::fs::read_to_string(&note).unwrap();
    for e in expect {
        assert!(text.contains(e), "{name}: note lacks `{e}`: {text}");
    }
    assert!(
        d.rejected().join(name).symlink_metadata().is_ok(),
        "{name} moved to rejected/"
    );
    d.drop_file(
        "good2.jsonl",
        jsonl_batch(40, 30, "2026-05-02", "g2").as_bytes(),
    );
    wait_for(60, "good2 processed", || {
        files_in(&d.processed()).contains(&"good2.jsonl".to_string())
    });
    assert_eq!(stop(daemon), 0, "the daemon kept running");
    let vs = jsonl(&novad_ok(&[
        "verdicts",
        "--store",
        &s(&d),
        "--format",
        "jsonl",
    ]));
    assert_eq!(vs.len(), 70, "nothing of the bad file was applied");
    let log = std::fs::read_to_string(d.log()).unwrap();
    assert!(
        log.contains("rejected batch file") && log.contains(name),
        "warning logged"
    );
}

#[test]
fn non_utf8_bytes_are_rejected_with_the_line() {
    rejected_with(
        "latin1.txt",
        |d| d.drop_file("latin1.txt", b"a fine first line\ncaf\xe9 au lait\n"),
        &["line 2", "UTF-8"],
    );
}

#[test]
fn a_binary_file_is_rejected() {
    let mut blob: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    blob[10] = 0;
    rejected_with(
        "blob.jsonl",
        move |d| d.drop_file("blob.jsonl", &blob),
        &["binary"],
    );
}

#[test]
fn an_empty_file_is_rejected() {
    rejected_with(
        "empty.txt",
        |d| d.drop_file("empty.txt", b""),
        &["no documents"],
    );
}

#[test]
fn a_malformed_json_line_is_rejected_with_its_number() {
    rejected_with(
        "broken.jsonl",
        |d| {
            d.drop_file(
                "broken.jsonl",
                b"{\"text\": \"fine\"}\n\n{\"text\": \"unterminated\n{\"text\": \"never read\"}\n",
            )
        },
        &["line 3", "malformed JSON"],
    );
}

#[test]
fn a_20_mb_single_line_is_rejected() {
    rejected_with(
        "huge.txt",
        |d| {
            let line = "lorem ipsum dolor ".repeat(20 * (1 << 20) / 18);
            d.drop_file("huge.txt", line.as_bytes());
        },
        &["line 1", "exceeds"],
    );
}

#[test]
fn a_symlink_is_rejected_and_its_target_untouched() {
    rejected_with(
        "link.jsonl",
        |d| {
            let target = d.tmp.path().join("outside.jsonl");
            std::fs::write(&target, jsonl_batch(100, 5, "2026-05-01", "o")).unwrap();
            std::os::unix::fs::symlink(&target, d.inbox().join("link.jsonl")).unwrap();
        },
        &["symbolic link"],
    );
}

#[test]
fn a_directory_is_rejected() {
    rejected_with(
        "subdir",
        |d| std::fs::create_dir(d.inbox().join("subdir")).unwrap(),
        &["directories are not batch files"],
    );
}

#[test]
fn a_slow_writer_and_an_rsync_style_rename_are_taken_only_when_complete() {
    use std::io::Write;
    let d = Dirs::new();
    let daemon = Daemon::start(&d, &["--k", "20"]);
    let body = jsonl_batch(0, 60, "2026-06-01", "slow");
    let lines: Vec<&str> = body.lines().collect();
    // appended in 12 pieces, 80 ms apart (below the 200 ms settle time)
    let path = d.inbox().join("slow.jsonl");
    std::fs::create_dir_all(d.inbox()).unwrap();
    let mut f = std::fs::File::create(&path).unwrap();
    for chunk in lines.chunks(5) {
        for l in chunk {
            writeln!(f, "{l}").unwrap();
        }
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(80));
        assert!(path.exists(), "taken while still being written");
    }
    drop(f);
    wait_for(60, "slow processed", || {
        files_in(&d.processed()).contains(&"slow.jsonl".to_string())
    });
    // rsync: a dot temp file written slowly, renamed at the end
    let tmp = d.inbox().join(".fast.jsonl.Xq8Zr1");
    let body2 = jsonl_batch(60, 40, "2026-06-02", "rsync");
    let mut f = std::fs::File::create(&tmp).unwrap();
    for chunk in body2.as_bytes().chunks(body2.len() / 4 + 1) {
        f.write_all(chunk).unwrap();
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(tmp.exists(), "the dot temp file is never touched");
    }
    drop(f);
    std::fs::rename(&tmp, d.inbox().join("fast.jsonl")).unwrap();
    wait_for(60, "rsync file processed", || {
        files_in(&d.processed()).contains(&"fast.jsonl".to_string())
    });
    assert_eq!(stop(daemon), 0);
    let vs = jsonl(&novad_ok(&[
        "verdicts",
        "--store",
        &s(&d),
        "--format",
        "jsonl",
    ]));
    assert_eq!(vs.len(), 100, "both files complete, one timestep each");
    assert!(files_in(&d.rejected()).is_empty());
}

fn make_store(d: &Dirs, files: usize) {
    for i in 0..files {
        let f = d.tmp.path().join(format!("m{i}.jsonl"));
        std::fs::write(&f, jsonl_batch(i * 50, 50, "2026-07-01", &format!("m{i}"))).unwrap();
        novad_ok(&[
            "ingest",
            "--store",
            &s(d),
            "--k",
            "20",
            &f.display().to_string(),
        ]);
    }
}

/// The store the previous release wrote from `examples/batches` (format 4, ℓ1; timesteps of
/// 40, 30 and 32 documents), copied into `d`, and the digest that release printed for it.
fn previous_release_store(d: &Dirs) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-format4-l1");
    copy_dir(&fixture, &d.store());
    std::fs::read_to_string(fixture.with_extension("digest")).unwrap()
}

fn set_format(d: &Dirs, bytes: &[u8]) {
    let db = sled::Config::new()
        .path(d.store().join("db"))
        .flush_every_ms(None)
        .open()
        .unwrap();
    db.open_tree("meta")
        .unwrap()
        .insert("format_version", bytes)
        .unwrap();
    db.flush().unwrap();
}

#[test]
fn a_store_from_a_newer_novad_is_refused_naming_both_versions() {
    let d = Dirs::new();
    make_store(&d, 1);
    set_format(&d, &postcard::to_stdvec(&99u32).unwrap());
    for cmd in [vec!["status"], vec!["verdicts"], vec!["digest"]] {
        let mut a = cmd.clone();
        let st = s(&d);
        a.extend(["--store", &st]);
        let o = novad(&a);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("newer")
                && err.contains("format 99")
                && err.contains(&format!("format {FORMAT_VERSION}")),
            "{err}"
        );
    }
    let o = novad(&[
        "run",
        "--inbox",
        &d.inbox().display().to_string(),
        "--store",
        &s(&d),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("format 99"));
}

#[test]
fn a_corrupt_format_version_is_a_clear_error() {
    let d = Dirs::new();
    make_store(&d, 1);
    set_format(&d, b"\xff\xff\xff\xff\xff\xff");
    let o = novad(&["status", "--store", &s(&d)]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("corrupt format version"), "{err}");
}

#[test]
fn a_format_1_fixture_store_is_backed_up_and_migrated() {
    let d = Dirs::new();
    let before = previous_release_store(&d);
    // turn it into a format-1 store: no `timesteps` tree
    {
        let db = sled::Config::new()
            .path(d.store().join("db"))
            .flush_every_ms(None)
            .open()
            .unwrap();
        assert!(db.drop_tree("timesteps").unwrap());
        db.open_tree("meta")
            .unwrap()
            .insert("format_version", postcard::to_stdvec(&1u32).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let st: serde_json::Value = serde_json::from_str(&novad_ok(&[
        "status",
        "--store",
        &s(&d),
        "--format",
        "json",
        "--recent",
        "10",
    ]))
    .unwrap();
    assert_eq!(st["format_version"], FORMAT_VERSION);
    let recent = st["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 3, "timestep records rebuilt");
    let mut docs: Vec<u64> = recent
        .iter()
        .map(|r| r["stats"]["docs"].as_u64().unwrap())
        .collect();
    docs.sort();
    assert_eq!(
        docs,
        [30, 32, 40],
        "documents per timestep, from the verdict log"
    );
    for r in recent {
        assert!(r["file"].as_str().unwrap().ends_with(".jsonl"));
        assert_eq!(r["hash"].as_str().unwrap().len(), 64);
    }
    let backups: Vec<String> = files_in(&d.store())
        .into_iter()
        .filter(|f| f.starts_with("backup-format-1-") && f.ends_with(".snapshot"))
        .collect();
    assert_eq!(backups.len(), 1, "a backup was written first");
    assert_eq!(
        novad_ok(&["digest", "--store", &s(&d)]).trim(),
        before.trim(),
        "model untouched"
    );
    // the backup is a valid snapshot of the format-1 store: importing it migrates again
    let s2 = d.tmp.path().join("restored").display().to_string();
    novad_ok(&[
        "import",
        "--store",
        &s2,
        &d.store().join(&backups[0]).display().to_string(),
    ]);
    assert_eq!(novad_ok(&["digest", "--store", &s2]).trim(), before.trim());
}

#[test]
fn a_format_2_store_gets_its_model_kind_and_topic_fields_by_migration() {
    let d = Dirs::new();
    let digest = previous_release_store(&d);
    // turn it into a format-2 store: topic records without kind/strength/profile (two on
    // timestep 1 of 30 documents, one on a timestep without a record), no model key
    let planted: Vec<(u64, u32, u32)> = vec![(1, 0, 7), (1, 1, 3), (9, 0, 4)];
    {
        let db = sled::Config::new()
            .path(d.store().join("db"))
            .flush_every_ms(None)
            .open()
            .unwrap();
        let topics = db.open_tree("topics").unwrap();
        topics.clear().unwrap();
        for &(step, id, size) in &planted {
            let v2 = postcard::to_stdvec(&(
                step,
                id,
                1_780_000_000_000i64 + step as i64,
                size,
                vec![("alpha".to_string(), 0.5f32), ("beta".to_string(), 0.25f32)],
                vec![format!("doc-{step}-{id}")],
                0.625f64,
            ))
            .unwrap();
            topics
                .insert(novad::store::schema::topic_key(step, id), v2)
                .unwrap();
        }
        let meta = db.open_tree("meta").unwrap();
        assert!(
            meta.remove("model").unwrap().is_some(),
            "format 3 names the model"
        );
        meta.insert("format_version", postcard::to_stdvec(&2u32).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let after: Vec<serde_json::Value> =
        novad_ok(&["topics", "--store", &s(&d), "--format", "jsonl"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    assert_eq!(after.len(), planted.len());
    for (a, &(step, id, size)) in after.iter().zip(&planted) {
        assert_eq!(a["timestep"], step);
        assert_eq!(a["id"], id);
        assert_eq!(a["size"], size);
        assert_eq!(a["mean_score"], 0.625);
        assert_eq!(a["terms"][0][0], "alpha");
        assert_eq!(a["docs"][0], format!("doc-{step}-{id}"));
        assert_eq!(a["kind"], "emerging");
        let want = if step == 1 { size as f64 / 30.0 } else { 0.0 };
        assert!(
            (a["strength"].as_f64().unwrap() - want).abs() < 1e-12,
            "{a}"
        );
        assert_eq!(a["profile"].as_array().unwrap().len(), 0);
    }
    let st: serde_json::Value = serde_json::from_str(&novad_ok(&[
        "status",
        "--store",
        &s(&d),
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(st["format_version"], FORMAT_VERSION);
    assert_eq!(st["model"], "l1");
    assert_eq!(
        novad_ok(&["digest", "--store", &s(&d)]).trim(),
        digest.trim()
    );
    let backups = files_in(&d.store())
        .into_iter()
        .filter(|f| f.starts_with("backup-format-2-"))
        .count();
    assert_eq!(backups, 1);
}
