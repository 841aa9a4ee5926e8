//! Text in a script written without spaces, end to end: with the default parameters (the
//! Unicode tokenizer) a Chinese eruption report among three days of Chinese chatter is novel,
//! and the terms that make it novel are words, not clauses.

use novad_models::text::TokenizerVersion;
use novad_models::{Engine, ModelParams, Params, StepOutput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Everyday sentences, no punctuation between their words.
const CHATTER: [&str; 12] = [
    "今天天气很好我们去公园散步",
    "周末和朋友一起吃火锅很开心",
    "超市的水果今天打折苹果很便宜",
    "昨天晚上看了一场足球比赛非常精彩",
    "早上喝咖啡然后去公司上班",
    "小猫在沙发上睡觉",
    "下雨了出门记得带伞",
    "妈妈做的饺子特别好吃",
    "孩子们在学校学习数学和音乐",
    "我们打算下个月去海边旅游",
    "新开的面包店排了很长的队",
    "晚饭后一家人一起看电视",
];

/// The eruption report: none of its content words occurs in the chatter.
const ERUPTION: &str = "火山昨天晚上突然喷发熔岩流向附近的村庄居民紧急撤离火山灰覆盖了整个城市";

/// `n` chatter documents of two or three sentences each.
fn chatter(r: &mut ChaCha8Rng, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let k = r.random_range(2..=3);
            (0..k)
                .map(|_| CHATTER[r.random_range(0..CHATTER.len())])
                .collect::<Vec<_>>()
                .join("，")
        })
        .collect()
}

fn step(engine: Engine, texts: &[String], t: i64) -> (Engine, StepOutput) {
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    engine.step_at(&texts, &vec![t; texts.len()]).unwrap()
}

#[test]
fn a_chinese_eruption_report_among_chatter_is_novel_for_its_words() {
    let params = Params::default();
    assert_eq!(params.tokenizer, Some(TokenizerVersion::Unicode));
    let mut engine = Engine::new(ModelParams::L1(params)).unwrap();
    let mut r = ChaCha8Rng::seed_from_u64(3);
    for t in 0..2 {
        let (next, out) = step(engine, &chatter(&mut r, 40), t);
        assert!(out.verdicts.iter().all(|v| !v.empty), "chatter has words");
        engine = next;
    }
    let mut day3 = chatter(&mut r, 30);
    let at = 17;
    day3.insert(at, ERUPTION.to_string());
    let (_, out) = step(engine, &day3, 2);
    let v = &out.verdicts[at];
    assert!(v.novel, "the eruption report is novel: {v:?}");
    let others = out.verdicts.iter().filter(|v| v.novel).count() - 1;
    assert!(others <= 2, "{others} chatter documents flagged too");
    // its top terms are words of the report, each a dictionary word, not a clause
    assert!(v.terms.len() >= 3, "{:?}", v.terms);
    let words = [
        "火山",
        "突然",
        "喷发",
        "熔岩",
        "流向",
        "附近",
        "村庄",
        "居民",
        "紧急",
        "撤离",
        "火山灰",
        "覆盖",
        "整个",
        "城市",
    ];
    for (term, _) in &v.terms {
        assert!(
            words.contains(&term.as_str()),
            "{term} is a word of the report"
        );
    }
    assert!(
        v.terms
            .iter()
            .any(|(t, _)| ["火山", "喷发", "熔岩", "火山灰"].contains(&t.as_str())),
        "{:?}",
        v.terms
    );
}
