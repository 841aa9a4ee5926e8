//! The dnmf and ostc models through the real binary: created with `--model`, remembered by
//! the store, resumed exactly after a restart and after kill -9, listed live by the daemon.

#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;

/// `novad status --format json` of a store.
fn status_json(store: &str) -> serde_json::Value {
    serde_json::from_str(&novad_ok(&["status", "--store", store, "--format", "json"])).unwrap()
}

/// Ingesting file by file (one process each: the state goes through the store every time)
/// gives the same model and verdicts as one process ingesting them all.
fn resumes_exactly(model: &str) {
    let d = Dirs::new();
    let files = example_batches();
    let one = d.tmp.path().join("one").display().to_string();
    let split = d.tmp.path().join("split").display().to_string();
    let mut args = vec!["ingest", "--store", &one, "--model", model];
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(names.iter().map(|s| s.as_str()));
    novad_ok(&args);
    for (i, f) in names.iter().enumerate() {
        if i == 0 {
            novad_ok(&["ingest", "--store", &split, "--model", model, f]);
        } else {
            // the store remembers its model: no --model needed
            novad_ok(&["ingest", "--store", &split, f]);
        }
    }
    assert_eq!(
        novad_ok(&["digest", "--store", &one]),
        novad_ok(&["digest", "--store", &split]),
        "{model}: state after a round trip through the store equals the in-memory one"
    );
    let v1 = novad_ok(&["verdicts", "--store", &one, "--format", "jsonl"]);
    let v2 = novad_ok(&["verdicts", "--store", &split, "--format", "jsonl"]);
    assert_eq!(v1, v2);
    assert_eq!(jsonl(&v1).len(), 40 + 30 + 32);
    let t1 = novad_ok(&["topics", "--store", &one, "--format", "jsonl"]);
    assert_eq!(
        t1,
        novad_ok(&["topics", "--store", &split, "--format", "jsonl"])
    );
    let st = status_json(&split);
    assert_eq!(st["model"], model);
    assert_eq!(st["state"]["timestep"], 3);
    // a store of one model refuses another, naming both
    let o = novad(&["ingest", "--store", &split, "--model", "l1", &names[0]]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(model) && err.contains("l1"), "{err}");
}

#[test]
fn dnmf_resumes_exactly_from_the_store() {
    resumes_exactly("dnmf");
}

#[test]
fn ostc_resumes_exactly_from_the_store() {
    resumes_exactly("ostc");
}

#[test]
fn model_parameters_print_as_toml_and_create_an_equal_store() {
    let d = Dirs::new();
    for model in ["dnmf", "ostc"] {
        let toml = novad_ok(&["params", "--model", model]);
        let path = d.tmp.path().join(format!("{model}.toml"));
        std::fs::write(&path, &toml).unwrap();
        let store = d.tmp.path().join(model).display().to_string();
        let f = example_batches()[0].display().to_string();
        novad_ok(&[
            "ingest",
            "--store",
            &store,
            "--model",
            model,
            "--config",
            &path.display().to_string(),
            "--seed",
            "7",
            &f,
        ]);
        let printed = novad_ok(&["params", "--store", &store]);
        let want = toml.replace("seed = 0", "seed = 7");
        assert_ne!(want, toml, "{model}: the defaults have seed = 0");
        assert_eq!(printed, want, "{model}");
        // ℓ1-only flags are refused for another model, naming the flag
        let o = novad(&[
            "ingest", "--store", &store, "--model", model, "--k", "5", &f,
        ]);
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("--k"));
    }
}

#[test]
fn dnmf_and_ostc_serve_topics_live_and_restart_from_the_store() {
    for model in ["dnmf", "ostc"] {
        let d = Dirs::new();
        let mut daemon = Daemon::start(&d, &["--model", model]);
        for p in example_batches() {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            d.drop_file(&name, &std::fs::read(&p).unwrap());
            wait_for(60, "batch processed", || {
                files_in(&d.processed()).contains(&name)
            });
        }
        assert!(daemon.is_running());
        let topics = jsonl(&novad_ok(&[
            "topics",
            "--store",
            &s(&d),
            "--format",
            "jsonl",
        ]));
        assert!(!topics.is_empty(), "{model}: topics listed while it runs");
        for t in &topics {
            assert!(t["kind"] == "emerging" || t["kind"] == "evolving");
            let strength = t["strength"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&strength), "{t}");
            assert!(!t["terms"].as_array().unwrap().is_empty());
        }
        let st = status_json(&s(&d));
        assert_eq!(st["model"], model);
        assert!(st["daemon_pid"].is_u64(), "answered by the running daemon");
        assert_eq!(stop(daemon), 0);
        // restarted without --model: the store's model goes on
        let daemon = Daemon::start(&d, &[]);
        d.drop_file(
            "04.jsonl",
            jsonl_batch(0, 30, "2026-03-05", "later").as_bytes(),
        );
        wait_for(60, "batch processed", || {
            files_in(&d.processed()).contains(&"04.jsonl".to_string())
        });
        let st = status_json(&s(&d));
        assert_eq!(st["model"], model);
        assert_eq!(st["state"]["timestep"], 4);
        assert_eq!(st["verdicts"], 40 + 30 + 32 + 30);
        assert_eq!(stop(daemon), 0);
    }
}

#[test]
fn kill_9_loses_and_duplicates_nothing_for_dnmf_and_ostc() {
    // both take ~0.1–0.2 s per 40-post batch on a workstation: kills up to 300 ms after the
    // daemon's last observed progress let some batches finish and cut others, and 40 files
    // outlast 8 cycles of at most 2 awaited files each
    for (i, (model, files, window)) in [("dnmf", 40, 0..300), ("ostc", 40, 0..300)]
        .into_iter()
        .enumerate()
    {
        let r = crash_cycles_with(8, files, 40, 100 + i as u64, &["--model", model], window);
        assert!(r.kills >= 4 && r.progress >= 1, "{model}: {r:?}");
    }
}
