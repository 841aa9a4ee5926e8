//! `GET /metrics` of the real daemon (`novad run --http`) after it ingested the example
//! batches: the text parses as Prometheus exposition, its counts agree with the API's
//! timesteps, refusals are counted, and the path needs the token like every other.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;
use http::*;
use prometheus_parse::{Sample, Scrape, Value};

/// The samples of a `/metrics` answer.
fn parse(text: &str) -> Vec<Sample> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    Scrape::parse(lines).expect("Prometheus text").samples
}

/// The value of the sample `name` whose labels include `labels`; panics when there is none.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let s = samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?} in {samples:#?}"));
    match s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        ref other => panic!("{name}: not a single value: {other:?}"),
    }
}

#[test]
fn metrics_count_what_was_ingested_and_answered_and_need_the_token() {
    let d = Dirs::new();
    let s = start(&d, &[]);
    let batches = example_batches();
    for b in &batches {
        ingest_example(&d, b);
    }
    // a folder in the inbox is rejected
    std::fs::create_dir_all(d.inbox().join("not-a-batch")).unwrap();
    wait_for(60, "the folder rejected", || {
        d.rejected().join("not-a-batch").is_dir()
    });

    // two refusals: the API and the metrics without the token
    assert_eq!(get(&s.base, "/api/v1/status", None, &[]).0, 401);
    let (st, body) = get(&s.base, "/metrics", None, &[]);
    assert_eq!(st, 401, "/metrics without the token: {body}");
    assert!(!body.contains("novad_"), "{body}");

    let items = api(&s, "/api/v1/timesteps")["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        items.len() >= batches.len(),
        "one timestep or more per batch"
    );
    let docs: u64 = items.iter().map(|t| t["docs"].as_u64().unwrap()).sum();
    let novel: u64 = items.iter().map(|t| t["novel"].as_u64().unwrap()).sum();
    let last = items
        .iter()
        .map(|t| t["record"]["timestep"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(docs > 0);

    let (st, heads, body) = get_raw(&s.base, "/metrics", &s.token, &[]);
    assert_eq!(st, 200);
    assert_eq!(
        header(&heads, "content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert_eq!(header(&heads, "cache-control"), Some("no-store"));
    assert_eq!(header(&heads, "etag"), None, "not an answer of the cache");
    let text = String::from_utf8(body).unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let m = parse(&text);

    assert_eq!(value(&m, "novad_documents_total", &[]), docs as f64);
    assert_eq!(value(&m, "novad_novel_documents_total", &[]), novel as f64);
    assert_eq!(value(&m, "novad_timesteps_total", &[]), items.len() as f64);
    assert_eq!(
        value(&m, "novad_timestep_seconds_count", &[]),
        items.len() as f64
    );
    let buckets = m
        .iter()
        .find_map(|s| match &s.value {
            Value::Histogram(h) if s.metric == "novad_timestep_seconds" => Some(h.clone()),
            _ => None,
        })
        .expect("the timestep histogram's buckets");
    let inf = buckets
        .iter()
        .find(|b| b.less_than.is_infinite())
        .expect("the +Inf bucket");
    assert_eq!(inf.count, items.len() as f64);
    assert!(value(&m, "novad_timestep_seconds_sum", &[]) > 0.0);
    assert_eq!(value(&m, "novad_timestep", &[]), last as f64);
    assert_eq!(value(&m, "novad_rejected_files_total", &[]), 1.0);
    assert_eq!(value(&m, "novad_inbox_files_waiting", &[]), 0.0);
    let store = value(&m, "novad_store_bytes", &[]);
    assert!(store > 0.0, "the store's size: {store}");
    assert_eq!(
        value(&m, "novad_http_responses_total", &[("code", "401")]),
        2.0
    );
    assert!(value(&m, "novad_http_responses_total", &[("code", "200")]) >= 1.0);
    assert_eq!(value(&m, "novad_webhook_backlog", &[]), 0.0);
    assert_eq!(value(&m, "novad_webhook_parked", &[]), 0.0);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(value(&m, "novad_build_info", &[("version", version)]), 1.0);

    // the scrape itself was answered: the next one counts one more 200
    let ok = value(&m, "novad_http_responses_total", &[("code", "200")]);
    let (st, again) = get(&s.base, "/metrics", Some(&s.token), &[]);
    assert_eq!(st, 200);
    let again = parse(&again);
    assert_eq!(
        value(&again, "novad_http_responses_total", &[("code", "200")]),
        ok + 1.0
    );
}
