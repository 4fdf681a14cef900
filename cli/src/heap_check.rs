//! `vmscope check --heap 'Leaky: count == 0' --pid PID`: assertions over a heap histogram, for
//! CI, after the memory-profiler DSL's assertions over heap structures.
//!
//! An assertion is `CLASS: MEASURE OP N`: MEASURE is `count` (instances) or `bytes`, either
//! followed by `growth` for the change since the histogram `--since` names; OP is one of `==`,
//! `!=`, `<`, `<=`, `>`, `>=`; N an integer (`1_000` and `1,000` read as 1000). A class the
//! histogram does not list has no instances: a leak assertion `count == 0` holds once the VM
//! collected them all, and the line says the class was not found, with close names, so that a
//! typo shows.
//!
//! An assertion may measure a structure query instead of a class (`QUERY: count|bytes OP N`,
//! the query as `vmscope heap --query` reads it: `Order where special == 1 from instances of
//! Order: count == 0`), from a VM that serves its heap: its objects or bytes over every
//! structure the query finds. Queries are asked of the process, never of a kept histogram, and
//! take no growth.

use std::path::Path;

use vmscope_model::heap::HeapHistogram;
use vmscope_proto::v1 as pb;

use crate::{
    check::Outcome,
    heap::{Which, fetch_pair},
};

/// What an assertion measures of its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Its instances.
    Count,
    /// Their bytes.
    Bytes,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    fn holds(self, value: i128, bound: i128) -> bool {
        match self {
            Op::Eq => value == bound,
            Op::Ne => value != bound,
            Op::Lt => value < bound,
            Op::Le => value <= bound,
            Op::Gt => value > bound,
            Op::Ge => value >= bound,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// One heap assertion.
#[derive(Debug, Clone, PartialEq)]
pub struct HeapAssertion {
    /// A structure query measured instead of the class (`class` is then the query's text).
    pub query: Option<pb::StructureQuery>,
    /// The class, by its exact name (`Leaky`, `java.lang.String`, `[B`).
    pub class: String,
    /// What is measured.
    pub measure: Measure,
    /// The change since an earlier histogram rather than the value.
    pub growth: bool,
    /// The comparison.
    pub op: Op,
    /// The bound.
    pub bound: i128,
    /// As written.
    pub text: String,
}

/// Why an assertion does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "heap assertion {text:?}: {why} (write CLASS: count|bytes [growth] ==|!=|<|<=|>|>= N, e.g. 'Leaky: count == 0')"
)]
pub struct ParseError {
    text: String,
    why: String,
}

/// Reads `CLASS: MEASURE [growth] OP N`.
pub fn parse(text: &str) -> Result<HeapAssertion, ParseError> {
    let error = |why: &str| ParseError {
        text: text.to_owned(),
        why: why.to_owned(),
    };
    // HotSpot's class names hold no colon: the last one ends the class.
    let (class, rest) = text
        .rsplit_once(':')
        .ok_or_else(|| error("no `:` after the class"))?;
    let class = class.trim();
    let query = if class.split_whitespace().any(|w| w == "from") {
        Some(crate::heap_query::parse(class).map_err(|e| error(&e.to_string()))?)
    } else {
        None
    };
    if query.is_none() && (class.is_empty() || class.contains(char::is_whitespace)) {
        return Err(error("the class must be one name, without spaces"));
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (measure, rest) = match words.split_first() {
        Some((&"count", rest)) => (Measure::Count, rest),
        Some((&"bytes", rest)) => (Measure::Bytes, rest),
        _ => return Err(error("the measure is `count` or `bytes`")),
    };
    let (growth, rest) = match rest.split_first() {
        Some((&"growth", _)) if query.is_some() => {
            return Err(error("a structure query measures no growth"));
        }
        Some((&"growth", rest)) => (true, rest),
        _ => (false, rest),
    };
    let [op, bound] = rest else {
        return Err(error("a comparison and a number must follow the measure"));
    };
    let op = match *op {
        "==" => Op::Eq,
        "!=" => Op::Ne,
        "<" => Op::Lt,
        "<=" => Op::Le,
        ">" => Op::Gt,
        ">=" => Op::Ge,
        _ => return Err(error("the comparison is one of == != < <= > >=")),
    };
    let digits: String = bound.chars().filter(|&c| c != '_' && c != ',').collect();
    let bound = digits
        .parse::<i128>()
        .ok()
        .filter(|b| growth || *b >= 0)
        .ok_or_else(|| error("the bound is an integer (negative only for a growth)"))?;
    Ok(HeapAssertion {
        query,
        class: class.to_owned(),
        measure,
        growth,
        op,
        bound,
        text: text.to_owned(),
    })
}

/// A class's instances and bytes in `histogram`, summed over its modules and loaders; `None`
/// when it lists no such class.
fn totals(histogram: &HeapHistogram, class: &str) -> Option<(u64, u64)> {
    histogram
        .classes
        .iter()
        .filter(|c| c.name == class)
        .map(|c| (c.instances, c.bytes))
        .reduce(|a, b| (a.0 + b.0, a.1 + b.1))
}

/// `vmscope check --heap`'s assertions and the histograms they are judged on.
#[derive(Debug, Clone, Default)]
pub struct HeapChecks {
    /// The assertions.
    pub assertions: Vec<HeapAssertion>,
    /// The process to take a new histogram of.
    pub pid: Option<u32>,
    /// Or the kept histogram to check.
    pub id: Option<u64>,
    /// The earlier histogram growth is measured from.
    pub since: Option<u64>,
}

impl HeapChecks {
    /// Judges the assertions on a new histogram of the pid, or on the kept one; those of
    /// structure queries on the VM's answers (no histogram is taken for them alone: each costs
    /// the VM a full GC).
    pub async fn judge(&self, socket: &Path) -> anyhow::Result<Vec<Outcome>> {
        let (queries, classes): (Vec<HeapAssertion>, Vec<HeapAssertion>) = self
            .assertions
            .iter()
            .cloned()
            .partition(|a| a.query.is_some());
        let mut outcomes = Vec::new();
        if !classes.is_empty() {
            outcomes.extend(self.judge_histogram(socket, &classes).await?);
        }
        for a in &queries {
            let Some(pid) = self.pid else {
                anyhow::bail!(
                    "heap assertion {:?} asks a structure query of the VM: give --pid PID",
                    a.text
                );
            };
            let query = a.query.clone().expect("partitioned above");
            let answer = crate::heap_query::ask(socket, pid, query, false, None).await?;
            outcomes.push(judge_query(a, &answer));
        }
        Ok(outcomes)
    }

    async fn judge_histogram(
        &self,
        socket: &Path,
        assertions: &[HeapAssertion],
    ) -> anyhow::Result<Vec<Outcome>> {
        let which = match (self.pid, self.id) {
            (Some(pid), _) => Which::Take {
                pid,
                all: false,
                timeout: None,
            },
            (None, Some(id)) => Which::Kept(id),
            (None, None) => {
                anyhow::bail!("--heap checks a heap histogram: give --pid PID or --heap-id ID")
            }
        };
        let (histogram, since) = fetch_pair(socket, which, self.since).await?;
        judge(&histogram, since.as_ref(), assertions)
    }
}

/// Judges an assertion of a structure query on the VM's answer: its objects or bytes over
/// every structure found.
pub fn judge_query(a: &HeapAssertion, answer: &vmscope_model::heap::HeapStructures) -> Outcome {
    let (objects, bytes) = answer
        .structures
        .iter()
        .fold((0u64, 0u64), |(o, b), s| (o + s.objects, b + s.bytes));
    let (value, unit) = match a.measure {
        Measure::Count => (objects, "objects"),
        Measure::Bytes => (bytes, "bytes"),
    };
    Outcome {
        subject: a.class.clone(),
        held: a.op.holds(i128::from(value), a.bound),
        line: format!(
            "{}: {value} {unit} in {} structures, asked {} {} (pid {}, {})",
            a.class,
            answer.structures.len(),
            a.op.text(),
            a.bound,
            answer.pid,
            if answer.live {
                "live objects after a full GC"
            } else {
                "all objects"
            }
        ),
    }
}

/// Judges `assertions` on `histogram` (and `since`, for growth). An assertion of growth with
/// no earlier histogram is an error: it cannot be judged.
pub fn judge(
    histogram: &HeapHistogram,
    since: Option<&HeapHistogram>,
    assertions: &[HeapAssertion],
) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::with_capacity(assertions.len());
    for a in assertions {
        let now = totals(histogram, &a.class);
        let pick = |t: Option<(u64, u64)>| {
            let (count, bytes) = t.unwrap_or_default();
            i128::from(match a.measure {
                Measure::Count => count,
                Measure::Bytes => bytes,
            })
        };
        let value = if a.growth {
            let Some(before) = since else {
                anyhow::bail!(
                    "heap assertion {:?} is about growth: give --since ID, the histogram to \
                     compare with",
                    a.text
                );
            };
            pick(now) - pick(totals(before, &a.class))
        } else {
            pick(now)
        };
        let unit = match a.measure {
            Measure::Count => "instances",
            Measure::Bytes => "bytes",
        };
        let measured = if a.growth {
            format!(
                "{value:+} {unit} since histogram {}",
                since.map_or(0, |s| s.id)
            )
        } else {
            format!("{value} {unit}")
        };
        let absent = if now.is_none() {
            let mut names: Vec<&str> = histogram.classes.iter().map(|c| c.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            let close = vmscope_report::tree::close_names(&a.class, names.into_iter());
            if close.is_empty() {
                " (no such class in the histogram)".to_owned()
            } else {
                format!(
                    " (no such class in the histogram; did you mean {}?)",
                    close.join(", ")
                )
            }
        } else {
            String::new()
        };
        outcomes.push(Outcome {
            subject: a.class.clone(),
            held: a.op.holds(value, a.bound),
            line: format!(
                "{}: {measured}{absent}, asked {} {} (heap histogram {} of pid {})",
                a.class,
                a.op.text(),
                a.bound,
                histogram.id,
                histogram.pid
            ),
        });
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use vmscope_model::heap::ClassCount;

    use super::*;

    fn histogram(id: u64, leaky: u64) -> HeapHistogram {
        let class = |name: &str, module: &str, instances: u64| ClassCount {
            name: name.into(),
            module: module.into(),
            instances,
            bytes: instances * 16,
        };
        let mut classes = vec![class("[B", "java.base", 10)];
        if leaky > 0 {
            classes.push(class("Leaky", "", leaky));
            classes.push(class("Leaky", "other", 1));
        }
        HeapHistogram {
            id,
            pid: 7,
            classes,
            ..HeapHistogram::default()
        }
    }

    #[test]
    fn assertions_read_as_written_and_bad_ones_say_how_to_write_them() {
        let a = parse("Leaky: count growth <= 1,000").unwrap();
        assert_eq!(
            (a.class.as_str(), a.measure, a.growth, a.op, a.bound),
            ("Leaky", Measure::Count, true, Op::Le, 1000)
        );
        assert_eq!(parse("[B: bytes > 1_000_000").unwrap().bound, 1_000_000);
        assert_eq!(parse("Leaky: count growth == -5").unwrap().bound, -5);
        for bad in [
            "Leaky count == 0",
            "Leaky: size == 0",
            "Leaky: count = 0",
            "Leaky: count == many",
            "Leaky: count == -1",
            "Big Leaky: count == 0",
            "Leaky: count ==",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                err.to_string().contains("e.g. 'Leaky: count == 0'"),
                "{err}"
            );
        }
    }

    #[test]
    fn values_sum_a_class_over_its_loaders_and_growth_compares_with_since() {
        let (before, after) = (histogram(1, 100), histogram(2, 1_100));
        let outcomes = judge(
            &after,
            Some(&before),
            &[
                parse("Leaky: count == 1101").unwrap(),
                parse("Leaky: count growth <= 0").unwrap(),
                parse("Leaky: bytes growth == 16000").unwrap(),
            ],
        )
        .unwrap();
        let held: Vec<bool> = outcomes.iter().map(|o| o.held).collect();
        assert_eq!(held, [true, false, true], "{outcomes:?}");
        assert!(
            outcomes[1]
                .line
                .contains("+1000 instances since histogram 1")
        );
        let err = judge(&after, None, &[parse("Leaky: count growth <= 0").unwrap()]);
        assert!(err.unwrap_err().to_string().contains("give --since"));
    }

    #[test]
    fn a_class_with_no_instances_counts_zero_and_a_typo_shows() {
        let gone = histogram(3, 0);
        let outcomes = judge(
            &gone,
            None,
            &[
                parse("Leaky: count == 0").unwrap(),
                parse("[b: count > 0").unwrap(),
            ],
        )
        .unwrap();
        assert!(outcomes[0].held, "{outcomes:?}");
        assert!(outcomes[0].line.contains("no such class in the histogram"));
        assert!(!outcomes[1].held);
        assert!(
            outcomes[1].line.contains("did you mean [B?"),
            "{outcomes:?}"
        );
    }
}
