//! `vmscope heap --pid PID --query 'Node from globals per root'`: structures of a VM's heap,
//! after the memory-profiler DSL (the objects reached from each root through members only),
//! from a VM that serves its heap (`CodeMap.ServeHeap`).
//!
//! A query reads `CLASSES [where FIELD == N [and FIELD == N ...]] from ROOTS [per root]`:
//! CLASSES is `*` (any class) or class names separated by `|`; ROOTS is `globals` (each of the
//! VM's globals), `global NAME`, or `instances of CLASS`; `per root` makes one structure per
//! root (the DSL's factories), else one of all roots together.

use std::{io::Write, path::Path, time::Duration};

use anyhow::Context as _;
use vmscope_model::heap::HeapStructures;
use vmscope_proto::v1 as pb;

use crate::{client, report::text::grouped};

/// Why a query does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "heap query {text:?}: {why} (write CLASSES [where FIELD == N [and ...]] from globals|global NAME|instances of CLASS [per root], e.g. 'Node from globals per root')"
)]
pub struct QueryError {
    text: String,
    why: String,
}

/// Reads a query.
pub fn parse(text: &str) -> Result<pb::StructureQuery, QueryError> {
    let error = |why: &str| QueryError {
        text: text.to_owned(),
        why: why.to_owned(),
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    let from = words
        .iter()
        .position(|&w| w == "from")
        .ok_or_else(|| error("no `from` before the roots"))?;
    let (member, roots) = (&words[..from], &words[from + 1..]);
    let (classes, tests) = match member.iter().position(|&w| w == "where") {
        Some(at) => (&member[..at], Some(&member[at + 1..])),
        None => (member, None),
    };
    let classes = match classes {
        [] => return Err(error("no class before `from` (`*` for any)")),
        ["*"] => Vec::new(),
        [names] => names.split('|').map(str::to_owned).collect(),
        _ => {
            return Err(error(
                "classes are one word: names separated by `|`, or `*`",
            ));
        }
    };
    if classes.iter().any(String::is_empty) {
        return Err(error("an empty class name"));
    }
    let mut fields = Vec::new();
    match tests {
        None => {}
        Some([]) => return Err(error("nothing after `where`")),
        Some(tests) => {
            for test in tests.split(|&w| w == "and") {
                let [field, "==", value] = test else {
                    return Err(error("a field test reads FIELD == N"));
                };
                let digits: String = value.chars().filter(|&c| c != '_' && c != ',').collect();
                let value = digits
                    .parse::<i64>()
                    .map_err(|_| error("a field's value is an integer"))?;
                fields.push(pb::FieldEquals {
                    field: (*field).to_owned(),
                    value,
                });
            }
        }
    }
    let (roots, per_root) = match roots.strip_suffix(&["per", "root"]) {
        Some(roots) => (roots, true),
        None => (roots, false),
    };
    use pb::structure_query::Roots;
    let roots = match roots {
        ["globals"] => Roots::Globals(pb::AllGlobals {}),
        ["global", name] => Roots::Global((*name).to_owned()),
        ["instances", "of", class] => Roots::InstancesOf((*class).to_owned()),
        _ => {
            return Err(error(
                "the roots are `globals`, `global NAME` or `instances of CLASS`, then \
                 `per root` if wanted",
            ));
        }
    };
    Ok(pb::StructureQuery {
        roots: Some(roots),
        member: Some(pb::MemberPredicate { classes, fields }),
        per_root,
    })
}

/// What `vmscope heap --query` asks.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The VM's process.
    pub pid: u32,
    /// The query as written.
    pub query: &'a str,
    /// Count garbage too, with no full GC first.
    pub all: bool,
    /// How long to wait for the VM (the daemon's default when `None`).
    pub timeout: Option<Duration>,
}

/// `vmscope heap --query`: reads the query, asks the VM, and writes its answer to `output`
/// (standard output when `None` or `-`), as text or JSON.
pub async fn run(
    socket: &Path,
    ask: Ask<'_>,
    json: bool,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let query = parse(ask.query)?;
    let answer = self::ask(socket, ask.pid, query, ask.all, ask.timeout).await?;
    let mut out = crate::output::Destination::choose(output, false).open()?;
    if json {
        let report = QueryReport {
            query: ask.query,
            answer: &answer,
        };
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        render_text(ask.query, &answer, &mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// Asks the VM of `pid` for the structures `query` describes.
pub async fn ask(
    socket: &Path,
    pid: u32,
    query: pb::StructureQuery,
    all: bool,
    timeout: Option<Duration>,
) -> anyhow::Result<HeapStructures> {
    let mut client = client::connect(socket).await?;
    let answer = client
        .query_heap(pb::QueryHeapRequest {
            pid,
            query: Some(query),
            all,
            timeout: timeout.and_then(|t| prost_types::Duration::try_from(t).ok()),
        })
        .await
        .map_err(client::status_error)
        .with_context(|| format!("no heap query of pid {pid}"))?;
    Ok(answer.into_inner().into())
}

/// What `vmscope heap --query` prints as JSON.
#[derive(Debug, serde::Serialize)]
pub struct QueryReport<'a> {
    /// The query as written.
    pub query: &'a str,
    /// The answer.
    #[serde(flatten)]
    pub answer: &'a HeapStructures,
}

/// Prints the answer to `query`: one line per structure, its objects and bytes.
pub fn render_text(
    query: &str,
    answer: &HeapStructures,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let what = if answer.live {
        "live objects, after a full GC"
    } else {
        "all objects, unreachable ones too, no GC"
    };
    writeln!(
        out,
        "Heap structures of pid {} ({}), {what}: {query}",
        answer.pid, answer.command
    )?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if let (Some(elapsed), Some(pause)) = (answer.elapsed, answer.pause) {
        writeln!(
            out,
            "Answered by {} in {:.1} ms; its threads were stopped {:.1} ms for it",
            answer.runtime,
            ms(elapsed),
            ms(pause)
        )?;
    }
    if answer.structures.is_empty() {
        writeln!(out, "No structure: no root is a member")?;
        return Ok(());
    }
    writeln!(out, "{:>14} {:>15}  ROOT", "OBJECTS", "BYTES")?;
    for s in &answer.structures {
        writeln!(
            out,
            "{:>14} {:>15}  {}",
            grouped(s.objects.into()),
            grouped(s.bytes.into()),
            s.root
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::structure_query::Roots;

    #[test]
    fn queries_read_as_written_and_bad_ones_say_how_to_write_them() {
        let q = parse("Node from globals per root").unwrap();
        assert_eq!(q.roots, Some(Roots::Globals(pb::AllGlobals {})));
        assert_eq!(q.member.as_ref().unwrap().classes, ["Node"]);
        assert!(q.per_root);
        let q =
            parse("Order|Item where special == 1 and kind == -2 from instances of Order").unwrap();
        let member = q.member.unwrap();
        assert_eq!(member.classes, ["Order", "Item"]);
        assert_eq!(
            member.fields,
            [
                pb::FieldEquals {
                    field: "special".into(),
                    value: 1
                },
                pb::FieldEquals {
                    field: "kind".into(),
                    value: -2
                }
            ]
        );
        assert_eq!(q.roots, Some(Roots::InstancesOf("Order".into())));
        assert!(!q.per_root);
        let q = parse("* from global list1").unwrap();
        assert!(q.member.unwrap().classes.is_empty());
        assert_eq!(q.roots, Some(Roots::Global("list1".into())));
        for (bad, why) in [
            ("Node in globals", "no `from`"),
            ("from globals", "no class"),
            ("Node where from globals", "nothing after `where`"),
            ("Node where special = 1 from globals", "FIELD == N"),
            ("Node where special == one from globals", "an integer"),
            ("Node from everywhere", "the roots are"),
            ("Node Order from globals", "one word"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("e.g. 'Node from globals per root'"), "{err}");
        }
    }
}
