//! Throughput of the classic and the Unicode tokenizer (default bounds and stop words): on the
//! 20 Newsgroups posts (English, mostly ASCII) and on Chinese text without spaces.
//!
//!     cargo run --release -p novad-lab --example bench_tokenize -- [corpus] [rounds]
//!
//! Defaults: ../shared/data/20news-bydate.tar.gz, 3 rounds (the best round is reported). The
//! Chinese text is a fixed set of sentences shuffled into 20 000 documents of 3–8 sentences
//! (about 12 MB). Reported: MB/s (of UTF-8 input) and tokens/s, single-threaded.
use std::path::PathBuf;
use std::time::Instant;

use novad_models::text::Tokenizer;
use rand::{Rng, SeedableRng};

/// Sentences of news and everyday Chinese, without punctuation inside.
const CHINESE: [&str; 16] = [
    "今天天气很好我们去公园散步",
    "周末和朋友一起吃火锅很开心",
    "超市的水果今天打折苹果很便宜",
    "昨天晚上看了一场足球比赛非常精彩",
    "火山昨天晚上突然喷发熔岩流向附近的村庄居民紧急撤离",
    "政府宣布将在明年投资建设新的高速铁路连接两个城市",
    "研究人员发现一种新的方法可以提高电池的储能效率",
    "股市今天上涨科技公司的股票表现最好",
    "气象部门提醒市民注意台风带来的强降雨",
    "这家医院引进了先进的设备为患者提供更好的治疗",
    "学生们正在准备下个月的期末考试",
    "国际会议讨论了气候变化和能源转型的问题",
    "新开的博物馆展出了许多珍贵的历史文物",
    "警方正在调查昨天发生在市中心的交通事故",
    "农民们今年的粮食产量比去年增加了一成",
    "这部电影讲述了一个关于友谊和勇气的故事",
];

/// (best seconds over `rounds`, tokens) of tokenizing every text.
fn time(tok: &Tokenizer, texts: &[String], rounds: usize) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut tokens = 0;
    for _ in 0..rounds {
        let t0 = Instant::now();
        tokens = texts.iter().map(|t| tok.tokens(t).len()).sum();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    (best, tokens)
}

fn report(what: &str, texts: &[String], rounds: usize) {
    let bytes: usize = texts.iter().map(String::len).sum();
    let ascii = texts.iter().filter(|t| t.is_ascii()).count();
    println!(
        "{what}: {} documents, {:.1} MB, {:.1}% all ASCII",
        texts.len(),
        bytes as f64 / 1e6,
        100.0 * ascii as f64 / texts.len() as f64
    );
    for (name, tok) in [
        ("classic", Tokenizer::new(2, 40, true, &[])),
        ("unicode", Tokenizer::unicode(2, 40, true, &[])),
    ] {
        let (s, n) = time(&tok, texts, rounds);
        println!(
            "  {name:8} {:8.1} MB/s {:8.2} M tokens/s ({n} tokens, {s:.3} s)",
            bytes as f64 / 1e6 / s,
            n as f64 / 1e6 / s
        );
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let corpus = PathBuf::from(
        a.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let rounds: usize = a.next().map_or(3, |s| s.parse().expect("rounds"));
    let posts = novad_lab::corpus::read_20news(&corpus).expect("read the corpus");
    let english: Vec<String> = posts.into_iter().map(|p| p.text).collect();
    report("20 Newsgroups", &english, rounds);

    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let chinese: Vec<String> = (0..20_000)
        .map(|_| {
            let n = r.random_range(3..=8);
            (0..n)
                .map(|_| CHINESE[r.random_range(0..CHINESE.len())])
                .collect::<Vec<_>>()
                .join("，")
        })
        .collect();
    report("Chinese", &chinese, rounds);
}
