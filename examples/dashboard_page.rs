//! The dashboard's page weight and load time in headless Chromium, on a daemon that ingested
//! 20 Newsgroups batches; saves a full-page screenshot.
//!
//!     cargo build --release && cargo run --release --example dashboard_page -- [batches] [docs] [png]
//!
//! Starts the real `novad run --http 127.0.0.1:0`, bootstraps on 1,000 posts, drops `batches`
//! (default 12) batches of `docs` (default 300) posts, one per day, each with a burst of
//! posts of one newsgroup (so emerging topics appear), then loads the dashboard three times and
//! prints bytes transferred and the time until every panel is drawn. The screenshot goes to
//! `png` (default target/dashboard.png).
#[path = "../tests/common/browser.rs"]
#[allow(dead_code)]
mod browser;
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;

/// `n` posts for day `day`: mostly the interleaved stream, plus a burst from one group.
fn batch(i: usize, n: usize, day: &str) -> String {
    let all = posts();
    let groups = [
        "sci.space",
        "rec.autos",
        "comp.graphics",
        "talk.politics.guns",
        "sci.med",
        "rec.sport.hockey",
    ];
    let burst_group = groups[i % groups.len()];
    let mut lines = jsonl_batch(1000 + i * n, n - n / 6, day, &format!("d{i:02}"));
    let burst: Vec<&(String, String)> = all
        .iter()
        .filter(|(g, _)| g == burst_group)
        .skip(i * 40)
        .take(n / 6)
        .collect();
    for (j, (_, text)) in burst.into_iter().enumerate() {
        let v = serde_json::json!({
            "id": format!("d{i:02}-{}-{j}", burst_group.replace('.', "-")),
            "time": format!("{day}T{:02}:{:02}:30Z", 8 + j / 60, j % 60),
            "text": text,
        });
        lines.push_str(&v.to_string());
        lines.push('\n');
    }
    lines
}

fn main() {
    let mut a = std::env::args().skip(1);
    let batches: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(12);
    let docs: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(300);
    let png = a.next().unwrap_or_else(|| "target/dashboard.png".into());
    let d = Dirs::new();
    let s = http::start(&d, &["--k", "100"]);
    let drop = |name: &str, body: String| {
        let before = files_in(&d.processed()).len();
        d.drop_file(name, body.as_bytes());
        wait_for(600, name, || files_in(&d.processed()).len() > before);
    };
    drop(
        "000-bootstrap.jsonl",
        jsonl_batch(0, 1000, "2026-02-28", "boot"),
    );
    for i in 0..batches {
        let day =
            chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap() + chrono::Days::new(i as u64);
        drop(
            &format!("{:03}-{day}.jsonl", i + 1),
            batch(i, docs, &day.to_string()),
        );
    }
    let mut b = browser::Browser::start(1440, 900);
    // sign in once (the link is one-time), then reload the page
    b.navigate(&s.login);
    b.wait_for(
        60,
        "the panels",
        "!!document.body && document.body.dataset.ready === '1'",
    );
    for run in 0..3 {
        b.navigate(&format!("{}/", s.base));
        b.wait_for(
            60,
            "the panels",
            "!!document.body && document.body.dataset.ready === '1'",
        );
        b.pump(300);
        let t = b.eval(
            "JSON.stringify({ready: Number(document.body.dataset.readyMs), \
              load: performance.getEntriesByType('navigation')[0].loadEventEnd, \
              dom: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd})",
        );
        let t: serde_json::Value = serde_json::from_str(t.as_str().unwrap()).unwrap();
        println!(
            "load {run}: {} bytes over the network (page + API answers); DOMContentLoaded {:.0} ms, load event {:.0} ms, all panels drawn {:.0} ms",
            b.bytes_received,
            t["dom"].as_f64().unwrap(),
            t["load"].as_f64().unwrap(),
            t["ready"].as_f64().unwrap()
        );
    }
    println!(
        "page weight (HTML + CSS + JS + icon, uncompressed): {} bytes",
        novad::http::assets::page_weight()
    );
    assert!(
        b.problems.is_empty(),
        "console or network problems: {:?}",
        b.problems
    );
    // the summary, timeline, topics and the top of the document list, small enough for docs/
    b.screenshot_with(std::path::Path::new(&png), 0.8, 1500.0);
    println!("screenshot: {png}");
}
