//! `vmscope heap`: what fills a process's heap, and what grew since an earlier histogram.
//!
//! The daemon asks the VM (HotSpot's `GC.class_histogram`, through its attach mechanism; a VM
//! that serves its heap over `CodeMap.ServeHeap`, at its next safepoint) and keeps each
//! histogram under an id; this fetches one, new or kept, and the one it is compared
//! with, and prints them: growth first, the leak hunter's question, then the heap itself.

use std::{io::Write, path::Path, time::Duration};

use anyhow::Context as _;
use vmscope_model::heap::{ClassGrowth, HeapHistogram, growth};
use vmscope_proto::v1 as pb;

use crate::{client, report::text::grouped};

/// Which histogram to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// A new one of this process.
    Take {
        /// The process.
        pid: u32,
        /// Every object, unreachable ones too, with no full collection first.
        all: bool,
        /// How long to wait for the VM (the daemon's default when `None`).
        timeout: Option<Duration>,
    },
    /// One the daemon kept.
    Kept(u64),
}

/// A histogram and, when asked, how it grew since another.
#[derive(Debug, serde::Serialize)]
pub struct HeapReport {
    /// The histogram.
    pub histogram: HeapHistogram,
    /// Its growth since an earlier one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<Growth>,
}

/// The classes that grew since an earlier histogram.
#[derive(Debug, serde::Serialize)]
pub struct Growth {
    /// The earlier histogram's id.
    pub since: u64,
    /// Seconds between the two.
    pub seconds: f64,
    /// Its instances and bytes, in all.
    pub total_instances: u64,
    /// See `total_instances`.
    pub total_bytes: u64,
    /// The classes that grew, most bytes gained first.
    pub classes: Vec<ClassGrowth>,
}

/// `vmscope heap`: fetches the histogram `which` says and the growth since `since`, and
/// writes them to `output` (standard output when `None` or `-`): as text with the `top`
/// classes, or as JSON with all of them.
pub async fn run(
    socket: &Path,
    which: Which,
    since: Option<u64>,
    top: usize,
    json: bool,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let report = fetch(socket, which, since).await?;
    let mut out = crate::output::Destination::choose(output, false).open()?;
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        render_text(&report, top, &mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// Fetches the histogram `which` says (taking it if asked), and the growth since `since`.
pub async fn fetch(socket: &Path, which: Which, since: Option<u64>) -> anyhow::Result<HeapReport> {
    let (histogram, before) = fetch_pair(socket, which, since).await?;
    Ok(HeapReport::new(histogram, before))
}

/// The histogram `which` says, and `since`'s, each fetched once: the earlier first, so that a
/// typo in its id or another process's histogram costs the JVM no full GC.
pub async fn fetch_pair(
    socket: &Path,
    which: Which,
    since: Option<u64>,
) -> anyhow::Result<(HeapHistogram, Option<HeapHistogram>)> {
    let mut client = client::connect(socket).await?;
    let before = match since {
        None => None,
        Some(id) => Some(
            one(&mut client, Which::Kept(id))
                .await
                .with_context(|| format!("cannot compare with heap histogram {id}"))?,
        ),
    };
    if let (Some(before), Which::Take { pid, .. }) = (&before, which) {
        same_process(before, pid, "a new histogram")?;
    }
    let histogram = one(&mut client, which).await?;
    if let Some(before) = &before {
        same_process(
            before,
            histogram.pid,
            &format!("histogram {}", histogram.id),
        )?;
    }
    Ok((histogram, before))
}

/// The histogram `which` says: a new one, or one the daemon kept.
pub async fn histogram(socket: &Path, which: Which) -> anyhow::Result<HeapHistogram> {
    one(&mut client::connect(socket).await?, which).await
}

async fn one(client: &mut client::Client, which: Which) -> anyhow::Result<HeapHistogram> {
    let answer = match which {
        Which::Take { pid, all, timeout } => client
            .take_heap_histogram(pb::TakeHeapHistogramRequest {
                pid,
                all,
                timeout: timeout.and_then(|t| prost_types::Duration::try_from(t).ok()),
            })
            .await
            .map_err(client::status_error)
            .with_context(|| format!("no heap histogram of pid {pid}"))?,
        Which::Kept(id) => client
            .get_heap_histogram(pb::GetHeapHistogramRequest { id })
            .await
            .map_err(client::status_error)?,
    };
    Ok(answer.into_inner().into())
}

impl HeapReport {
    /// `histogram`, with its growth since `before` (of the same process) when given.
    pub fn new(histogram: HeapHistogram, before: Option<HeapHistogram>) -> HeapReport {
        let growth = before.map(|before| {
            let seconds = match (before.taken_at, histogram.taken_at) {
                (Some(a), Some(b)) => b
                    .duration_since(a)
                    .map_or_else(|e| -e.duration().as_secs_f64(), |d| d.as_secs_f64()),
                _ => 0.0,
            };
            Growth {
                since: before.id,
                seconds,
                total_instances: before.total_instances,
                total_bytes: before.total_bytes,
                classes: growth(&before, &histogram),
            }
        });
        HeapReport { histogram, growth }
    }
}

/// Growth compares two histograms of one process: `before` must be of `pid`, the process of
/// `what`.
pub fn same_process(before: &HeapHistogram, pid: u32, what: &str) -> anyhow::Result<()> {
    if before.pid != pid {
        anyhow::bail!(
            "heap histogram {} is of pid {}, {what} of pid {pid}: growth compares two \
             histograms of one process",
            before.id,
            before.pid
        );
    }
    Ok(())
}

fn signed(n: i128) -> String {
    if n > 0 {
        format!("+{}", grouped(n))
    } else {
        grouped(n)
    }
}

/// A class as the report prints it: its module after it, and control characters escaped
/// (the names come from the target process, and must not drive the reader's terminal).
fn class_name(name: &str, module: &str) -> String {
    let printable = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    if module.is_empty() {
        printable(name)
    } else {
        format!("{} ({})", printable(name), printable(module))
    }
}

/// Prints `report` as text: its growth (the `top` classes that grew most), then its `top`
/// classes by bytes; `top` 0 prints every class.
pub fn render_text(report: &HeapReport, top: usize, out: &mut impl Write) -> std::io::Result<()> {
    let h = &report.histogram;
    let shown = |n: usize| if top == 0 { n } else { n.min(top) };
    let what = if h.live {
        "live objects, after a full GC"
    } else {
        "all objects, unreachable ones too, no GC"
    };
    writeln!(
        out,
        "Heap histogram {} of pid {} ({}), {what}: {} instances, {} bytes in {} classes",
        h.id,
        h.pid,
        h.command,
        grouped(h.total_instances.into()),
        grouped(h.total_bytes.into()),
        grouped(h.classes.len() as i128)
    )?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    match (h.elapsed, h.pause) {
        (Some(elapsed), Some(pause)) if h.runtime == "hotspot" => writeln!(
            out,
            "Taken in {:.1} ms; the JVM's threads were stopped {:.1} ms for it (its safepoint time)",
            ms(elapsed),
            ms(pause)
        )?,
        (Some(elapsed), Some(pause)) => writeln!(
            out,
            "Taken in {:.1} ms by {}; its threads were stopped {:.1} ms for it",
            ms(elapsed),
            h.runtime,
            ms(pause)
        )?,
        (Some(elapsed), None) => writeln!(
            out,
            "Taken in {:.1} ms (the VM keeps no safepoint time: the pause is not known)",
            ms(elapsed)
        )?,
        _ => {}
    }
    if let Some(g) = &report.growth {
        writeln!(out)?;
        let instances = i128::from(h.total_instances) - i128::from(g.total_instances);
        let bytes = i128::from(h.total_bytes) - i128::from(g.total_bytes);
        writeln!(
            out,
            "Growth since histogram {} ({:.1} s before): {} instances, {} bytes in all; {} \
             classes grew",
            g.since,
            g.seconds,
            signed(instances),
            signed(bytes),
            grouped(g.classes.len() as i128)
        )?;
        if !g.classes.is_empty() {
            writeln!(
                out,
                "{:>14} {:>15} {:>27}  CLASS",
                "INSTANCES", "BYTES", "INSTANCES BEFORE -> AFTER"
            )?;
            for c in &g.classes[..shown(g.classes.len())] {
                writeln!(
                    out,
                    "{:>14} {:>15} {:>27}  {}",
                    signed(c.instances_grown()),
                    signed(c.bytes_grown()),
                    format!(
                        "{} -> {}",
                        grouped(c.instances.0.into()),
                        grouped(c.instances.1.into())
                    ),
                    class_name(&c.name, &c.module)
                )?;
            }
            if shown(g.classes.len()) < g.classes.len() {
                writeln!(
                    out,
                    "(the {top} that grew most of {}: --top 0 shows them all)",
                    g.classes.len()
                )?;
            }
        }
    }
    writeln!(out)?;
    writeln!(out, "{:>6} {:>14} {:>15}  CLASS", "#", "INSTANCES", "BYTES")?;
    for (i, c) in h.classes[..shown(h.classes.len())].iter().enumerate() {
        writeln!(
            out,
            "{:>6} {:>14} {:>15}  {}",
            i + 1,
            grouped(c.instances.into()),
            grouped(c.bytes.into()),
            class_name(&c.name, &c.module)
        )?;
    }
    if shown(h.classes.len()) < h.classes.len() {
        writeln!(
            out,
            "(the {top} largest of {} classes: --top 0 shows them all)",
            h.classes.len()
        )?;
    }
    writeln!(
        out,
        "\n`vmscope heap --pid {} --since {}` shows what grows from here.",
        h.pid, h.id
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use vmscope_model::heap::ClassCount;

    use super::*;

    fn class(name: &str, instances: u64, bytes: u64) -> ClassCount {
        ClassCount {
            name: name.into(),
            module: String::new(),
            instances,
            bytes,
        }
    }

    #[test]
    fn the_text_shows_growth_first_then_the_largest_classes() {
        let before = HeapHistogram {
            id: 1,
            pid: 9,
            classes: vec![class("Leaky", 123_457, 2_962_968)],
            total_instances: 123_457,
            total_bytes: 2_962_968,
            ..HeapHistogram::default()
        };
        let after = HeapHistogram {
            id: 2,
            pid: 9,
            command: "java".into(),
            live: true,
            elapsed: Some(Duration::from_millis(40)),
            pause: Some(Duration::from_millis(31)),
            classes: vec![
                class("Leaky", 124_457, 2_986_968),
                ClassCount {
                    module: "java.base@17".into(),
                    ..class("[B", 10, 1_000)
                },
            ],
            total_instances: 124_467,
            total_bytes: 2_987_968,
            ..HeapHistogram::default()
        };
        let report = HeapReport {
            growth: Some(Growth {
                since: 1,
                seconds: 2.0,
                total_instances: before.total_instances,
                total_bytes: before.total_bytes,
                classes: growth(&before, &after),
            }),
            histogram: after,
        };
        let mut text = Vec::new();
        render_text(&report, 1, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("124,467 instances"), "{text}");
        assert!(lines[1].contains("stopped 31.0 ms"), "{text}");
        let growth = text.find("Growth since histogram 1").expect(&text);
        let leaky = text.find("+1,000").expect(&text);
        assert!(
            growth < leaky && leaky < text.find("     1 ").unwrap(),
            "{text}"
        );
        assert!(text.contains("123,457 -> 124,457"), "{text}");
        assert!(text.contains("(the 1 that grew most of 2"), "{text}");
        assert!(text.contains("(the 1 largest of 2 classes"), "{text}");
    }
}
