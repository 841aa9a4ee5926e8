//! The AUC table (Table 1) of a report.md, parsed back.

use super::TABLE1_HEADING;

/// The AUC table of a report.md, parsed back.
#[derive(Debug, Clone, PartialEq)]
pub struct Table1 {
    /// Score column titles (after the three count columns).
    pub columns: Vec<String>,
    /// Per timestep: index, novel, non-novel, one AUC per column (None for "–").
    pub rows: Vec<(usize, usize, usize, Vec<Option<f64>>)>,
    /// The "Avg." row.
    pub avg: Vec<Option<f64>>,
}

/// Parse the Table 1 section of a report.md.
pub fn parse_table1(md: &str) -> Result<Table1, String> {
    let start = md
        .find(TABLE1_HEADING)
        .ok_or_else(|| "no Table 1 heading".to_string())?;
    let lines: Vec<&str> = md[start..]
        .lines()
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .collect();
    if lines.len() < 3 {
        return Err("table too short".into());
    }
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let head = cells(lines[0]);
    if head.len() < 4 || head[0] != "Timestep" {
        return Err(format!("unexpected header {head:?}"));
    }
    let ncol = head.len();
    let num = |c: &str| -> Result<Option<f64>, String> {
        if c == "–" {
            return Ok(None);
        }
        let v: f64 = c.parse().map_err(|_| format!("not a number: {c:?}"))?;
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("AUC out of [0, 1]: {v}"));
        }
        Ok(Some(v))
    };
    let mut rows = Vec::new();
    let mut avg = None;
    for l in &lines[2..] {
        let c = cells(l);
        if c.len() != ncol {
            return Err(format!("row has {} cells, header {ncol}: {l}", c.len()));
        }
        let aucs = c[3..]
            .iter()
            .map(|x| num(x))
            .collect::<Result<Vec<_>, _>>()?;
        if c[0] == "Avg." {
            avg = Some(aucs);
        } else {
            let p = |x: &str| {
                x.parse::<usize>()
                    .map_err(|_| format!("not a count: {x:?}"))
            };
            rows.push((p(&c[0])?, p(&c[1])?, p(&c[2])?, aucs));
        }
    }
    Ok(Table1 {
        columns: head[3..].to_vec(),
        rows,
        avg: avg.ok_or("no Avg. row")?,
    })
}
