//! The dashboard in a real browser (headless Chromium over the DevTools protocol) against the
//! real daemon: sign in with the printed link, wait for the panels, check what they show
//! against the API, follow a live ingest, open a document, and find no console error.
#[path = "common/browser.rs"]
#[allow(dead_code)]
mod browser;
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;
use http::*;
use serde_json::Value;

fn text(b: &mut browser::Browser, selector: &str) -> String {
    b.eval(&format!(
        "(document.querySelector({selector:?}) || {{}}).textContent || ''"
    ))
    .as_str()
    .unwrap_or_default()
    .to_string()
}

#[test]
fn dashboard_shows_the_store_follows_ingest_and_logs_no_error() {
    let chromium = browser::chromium(); // fails here, with the install command, when missing
    assert!(chromium.exists());
    let d = Dirs::new();
    let s = start(&d, &[]);
    let batches = example_batches();
    for b in &batches[..batches.len() - 1] {
        ingest_example(&d, b);
    }
    let mut b = browser::Browser::start(1440, 900);
    b.navigate(&s.login);
    b.wait_for(
        60,
        "the panels",
        "!!document.body && document.body.dataset.ready === '1'",
    );
    b.wait_for(
        20,
        "the timeline",
        &format!(
            "document.querySelectorAll('#timeline g.step').length === {}",
            batches.len() - 1
        ),
    );
    assert_eq!(
        text(&mut b, "#kpi-timesteps"),
        (batches.len() - 1).to_string()
    );

    // a batch arrives while the page is open: the page hears of it on the event stream
    // (it no longer polls) and follows
    b.wait_for(
        20,
        "the event stream open",
        "document.body.dataset.stream === 'open'",
    );
    ingest_example(&d, &batches[batches.len() - 1]);
    b.wait_for(
        30,
        "the new timestep on the page",
        &format!(
            "document.body.dataset.lastEvent === '{last}' && \
             document.querySelectorAll('#timeline g.step').length === {n} && \
             document.getElementById('kpi-timesteps').textContent === '{n}' && \
             document.querySelectorAll('#diag tr[data-timestep]').length === {n}",
            n = batches.len(),
            last = batches.len() - 1
        ),
    );
    let steps = api(&s, "/api/v1/timesteps")["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(steps, batches.len());
    let docs: u64 = api(&s, "/api/v1/timesteps")["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["docs"].as_u64().unwrap())
        .sum();
    b.wait_for(
        10,
        "the document count",
        &format!("document.getElementById('kpi-docs').textContent === '{docs}'"),
    );

    // topics: every topic's top keyword is shown, in the stream and the cards
    let topics = api(&s, "/api/v1/topics")["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!topics.is_empty());
    b.wait_for(
        10,
        "topic cards",
        &format!(
            "document.querySelectorAll('#topics .topic').length === {}",
            topics.len().min(8)
        ),
    );
    if topics.len() > 8 {
        b.eval("document.getElementById('topics-more').click(); true");
        b.wait_for(
            10,
            "all topic cards",
            &format!(
                "document.querySelectorAll('#topics .topic').length === {}",
                topics.len()
            ),
        );
    }
    let shown = text(&mut b, "#topics");
    for t in &topics {
        let kw = t["terms"][0][0].as_str().unwrap();
        assert!(
            shown.contains(kw),
            "topic keyword `{kw}` not shown: {shown}"
        );
    }
    let blocks = b.eval("document.querySelectorAll('#topic-stream rect.blk').length");
    assert_eq!(blocks.as_u64().unwrap() as usize, topics.len());

    // events: one card per event, with its life and every member of every day
    let mut events: Vec<u64> = topics.iter().filter_map(|t| t["event"].as_u64()).collect();
    events.sort_unstable();
    events.dedup();
    assert!(!events.is_empty(), "the eruption is an event");
    b.wait_for(
        10,
        "event cards",
        &format!(
            "document.querySelectorAll('#events .event').length === {}",
            events.len()
        ),
    );
    let shown = text(&mut b, "#events");
    for e in &events {
        assert!(shown.contains(&format!("event {e}")), "{shown}");
    }
    for t in topics.iter().filter(|t| !t["event"].is_null()) {
        for m in t["members"].as_array().unwrap() {
            let m = m.as_str().unwrap();
            assert!(shown.contains(m), "member {m} not shown: {shown}");
        }
    }

    // the newest novel document heads the list, with its why-novel terms
    let newest: Value =
        api(&s, "/api/v1/verdicts?novel=true&order=desc&limit=1")["items"][0].clone();
    let id = newest["doc_id"].as_str().unwrap();
    b.wait_for(
        10,
        "the novel list",
        &format!("(document.querySelector('#novel-list tr a') || {{}}).textContent === {id:?}"),
    );
    let row = text(&mut b, "#novel-list tr");
    let term = newest["terms"][0][0].as_str().unwrap();
    assert!(
        row.contains(term),
        "why-novel term `{term}` missing from {row}"
    );

    // the document's detail opens from its link
    b.eval("document.querySelector('#novel-list tr a').click(); true");
    b.wait_for(10, "the detail drawer", &format!("!document.getElementById('drawer').hidden && document.getElementById('d-title').textContent === {id:?}"));
    let detail = text(&mut b, "#d-body");
    assert!(
        detail.contains(term) && detail.contains("novel"),
        "{detail}"
    );
    // with the hybrid detector: how it was scored, and its nearest earlier document
    let near = newest["hybrid"]["nearest"]["doc_id"].as_str().unwrap();
    assert!(
        detail.contains("nearest earlier document") && detail.contains(near),
        "nearest `{near}` missing from {detail}"
    );
    b.eval("document.getElementById('d-close').click(); true");

    // the date range drives the panels: one day → one timestep
    b.eval(
        "const s = document.getElementById('since'), u = document.getElementById('until');\
         s.value = '2026-03-03'; u.value = '2026-03-03'; s.dispatchEvent(new Event('change')); true",
    );
    b.wait_for(
        20,
        "the one-day range",
        "document.getElementById('kpi-timesteps').textContent === '1'",
    );
    let day_docs =
        api(&s, "/api/v1/timesteps?since=2026-03-03&until=2026-03-03")["items"][0]["docs"].clone();
    b.wait_for(
        10,
        "the day's documents",
        &format!("document.getElementById('kpi-docs').textContent === '{day_docs}'"),
    );
    b.eval("document.getElementById('range-all').click(); true");
    b.wait_for(
        20,
        "all time again",
        &format!(
            "document.getElementById('kpi-timesteps').textContent === '{}'",
            batches.len()
        ),
    );
    // a range picked while the page is still loading the previous one is not lost: the last
    // choice wins, whatever order the answers arrive in
    b.eval(
        "{ const s = document.getElementById('since'), u = document.getElementById('until');\
         s.value = '2026-03-03'; u.value = '2026-03-03'; s.dispatchEvent(new Event('change'));\
         document.getElementById('range-all').click(); } true",
    );
    b.wait_for(
        20,
        "all time after a quick change of mind",
        &format!(
            "!document.querySelector('main').hasAttribute('aria-busy') && \
             document.getElementById('kpi-timesteps').textContent === '{}'",
            batches.len()
        ),
    );
    b.pump(1500); // any answer still on its way has arrived: the page still shows all time
    assert_eq!(
        text(&mut b, "#kpi-timesteps"),
        batches.len().to_string(),
        "a late answer for the abandoned range replaced the last choice"
    );

    // no JSON dumped on the page, no errors in the console or the network
    let body = text(&mut b, "main");
    assert!(
        !body.contains("{\"") && !body.contains("[object"),
        "raw data on the page"
    );
    b.pump(500);
    assert!(
        b.problems.is_empty(),
        "console or network problems: {:?}",
        b.problems
    );
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard-test.png");
    b.screenshot(&out);
    assert!(std::fs::metadata(&out).unwrap().len() > 10_000);
}
