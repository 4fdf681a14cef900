//! Code maps published by a VM (`codemap.proto`): events checked and turned into timeline
//! changes. The same code serves the gRPC stream and the code map file.
//!
//! A VM is trusted with its own map only: an event that breaks the protocol's rules is refused
//! on its own, with a reason the VM's developer can act on, and the rest goes on. The VM's
//! statistics (settings, counters, gauges, intervals) come on the same publication, under the
//! same order in time, and are checked here too ([`crate::stats::vm::Rules`]).

use vmscope_model::CodeKind;
use vmscope_proto::v1::{CodeMapEvent, code_map_event::Event};

use super::{
    code::{Code, CodeSource, CodeStore, PcPoint},
    refusals::Reason,
    registry::MAX_FUTURE_NS,
    timeline::Change,
};
use crate::{
    stats::vm::{Broken, Rules, StatEvent},
    sys,
};

/// The kind a publication gives an entry: unspecified, or unknown to this daemon, is
/// [`CodeKind::Unknown`] (the proto's own reading of a kind, but every entry has one).
pub fn code_kind(kind: i32) -> CodeKind {
    vmscope_proto::model::model_code_kind(kind).unwrap_or(CodeKind::Unknown)
}

/// What an accepted event makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Nothing to pass on (a Sync).
    Nothing,
    /// A change of the code map, at its time.
    Change(u64, Change),
    /// A statistic of the VM's, at its time.
    Stat(u64, StatEvent),
}

/// An event refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Why, as the daemon counts it.
    pub reason: Reason,
    /// Why, for the VM's developer.
    pub problem: String,
}

impl Refused {
    fn invalid(problem: impl Into<String>) -> Refused {
        Refused {
            reason: Reason::Invalid,
            problem: problem.into(),
        }
    }
}

impl From<String> for Refused {
    fn from(problem: String) -> Refused {
        Refused::invalid(problem)
    }
}

/// Longest name a VM may give a piece of code.
pub const MAX_NAME_BYTES: usize = 4096;
/// Most mapped pcs in one entry.
pub const MAX_PC_MAP: usize = 1 << 20;
/// Deepest inline stack.
pub const MAX_INLINE_DEPTH: usize = 64;

/// The state of one publication (a stream or a file).
#[derive(Debug, Default)]
pub struct Publication {
    /// The VM's name, from its Hello.
    pub vm: String,
    /// The pid its Hello named.
    pub hello_pid: Option<u32>,
    /// The latest timestamp accepted: the map is known up to here.
    pub until_ns: u64,
    /// Events accepted.
    pub accepted: u64,
    /// Events refused.
    pub refused: u64,
    /// The first reasons for refusals.
    pub problems: Vec<String>,
    /// Whose codes it publishes: the publisher's uid for a stream, the file's owner for a
    /// code map file. Codes are charged to it in the store.
    pub owner: u32,
    /// What its statistics must keep to.
    rules: Rules,
}

/// Most problems kept per publication.
const MAX_PROBLEMS: usize = 16;

impl Publication {
    /// A publication of `owner`'s codes.
    pub fn owned_by(owner: u32) -> Publication {
        Publication {
            owner,
            ..Publication::default()
        }
    }

    /// Checks one event; returns what it makes.
    pub fn accept(&mut self, event: &CodeMapEvent, store: &CodeStore) -> Result<Accepted, Refused> {
        let result = self.check(event, store);
        match &result {
            Ok(_) => {
                self.accepted += 1;
                self.until_ns = self.until_ns.max(event.timestamp_ns);
            }
            Err(refused) => {
                self.refused += 1;
                if self.problems.len() < MAX_PROBLEMS {
                    self.problems.push(refused.problem.clone());
                }
            }
        }
        result
    }

    /// The publication closes: ends the intervals it left open, stamped at the time it was
    /// known up to, each also counted as refused ([`Reason::Unmatched`]: a begin without its
    /// end).
    pub fn close(&mut self) -> Vec<(u64, StatEvent)> {
        let ends = self.rules.close();
        if !ends.is_empty() {
            self.refused += ends.len() as u64;
            if self.problems.len() < MAX_PROBLEMS {
                self.problems.push(format!(
                    "{} intervals still open when the publication closed: ended then",
                    ends.len()
                ));
            }
        }
        ends.into_iter().map(|end| (self.until_ns, end)).collect()
    }

    fn check(&mut self, event: &CodeMapEvent, store: &CodeStore) -> Result<Accepted, Refused> {
        let ts = event.timestamp_ns;
        let Some(body) = &event.event else {
            return Err(Refused::invalid("an event with no content"));
        };
        if let Event::Hello(hello) = body {
            self.vm = truncate(&hello.vm, 128);
            self.hello_pid = (hello.pid != 0).then_some(hello.pid);
            return Ok(Accepted::Stat(ts, StatEvent::Vm(self.vm.clone())));
        }
        if self.accepted == 0 {
            return Err(Refused::invalid("the first event must be a Hello"));
        }
        if ts == 0 {
            return Err(Refused::invalid(
                "an event without a timestamp (timestamp_ns is 0)",
            ));
        }
        if ts < self.until_ns {
            return Err(Refused {
                reason: Reason::TimeBackwards,
                problem: format!(
                    "timestamps went backwards: {ts} ns after {} ns",
                    self.until_ns
                ),
            });
        }
        // Before it becomes the time the publication is known up to, which every later event
        // would then go back from (the registry refuses other sources' future changes).
        let now = sys::monotonic_ns();
        if ts > now.saturating_add(MAX_FUTURE_NS) {
            return Err(Refused {
                reason: Reason::Unapplicable,
                problem: format!(
                    "an event stamped {:.1} s in the future",
                    (ts - now) as f64 / 1e9
                ),
            });
        }
        let change = match body {
            Event::Hello(_) => unreachable!("handled above"),
            Event::Sync(_) => return Ok(Accepted::Nothing),
            Event::Configuration(_)
            | Event::Counter(_)
            | Event::Gauge(_)
            | Event::Begin(_)
            | Event::End(_)
            | Event::CounterRegion(_)
            | Event::CounterValues(_)
            | Event::ThreadCounter(_)
            | Event::ThreadLabels(_)
            | Event::LabelSet(_)
            | Event::DomainEvent(_) => {
                let stat = self
                    .rules
                    .check(body)
                    .map_err(|(broken, problem)| Refused {
                        reason: match broken {
                            Broken::UnknownKind => Reason::UnknownKind,
                            Broken::Unmatched => Reason::Unmatched,
                            Broken::TooMany => Reason::TooMany,
                            Broken::Invalid => Reason::Invalid,
                        },
                        problem,
                    })?;
                let stat = match stat {
                    StatEvent::ThreadCounter { tid, address, .. } => StatEvent::ThreadCounter {
                        tid,
                        address,
                        owner: self.owner,
                    },
                    StatEvent::ThreadLabels { tid, address, .. } => StatEvent::ThreadLabels {
                        tid,
                        address,
                        owner: self.owner,
                    },
                    stat => stat,
                };
                return Ok(Accepted::Stat(ts, stat));
            }
            Event::Zone(zone) => {
                if zone.end < zone.start
                    || zone.free_start < zone.start
                    || zone.free_start > zone.end
                {
                    return Err(Refused::invalid(format!(
                        "a code zone out of order: start {:#x}, free start {:#x}, end {:#x}",
                        zone.start, zone.free_start, zone.end
                    )));
                }
                Change::Zone {
                    start: zone.start,
                    free_start: zone.free_start,
                    end: zone.end,
                }
            }
            Event::Load(entry) => {
                let code = self.code(entry)?;
                Change::Load {
                    start: entry.start,
                    size: (entry.size != 0).then_some(entry.size),
                    code: store.intern(code, self.owner).map_err(|full| Refused {
                        reason: Reason::StoreFull,
                        problem: full.to_string(),
                    })?,
                }
            }
            Event::Move(m) => Change::Move {
                from: m.from,
                to: m.to,
            },
            Event::Free(f) => Change::Free { start: f.start },
        };
        Ok(Accepted::Change(ts, change))
    }

    fn code(&self, entry: &vmscope_proto::v1::CodeEntry) -> Result<Code, String> {
        if entry.name.len() > MAX_NAME_BYTES {
            return Err(format!(
                "a name of {} bytes (at most {MAX_NAME_BYTES})",
                entry.name.len()
            ));
        }
        if entry.pc_map.len() > MAX_PC_MAP {
            return Err(format!(
                "{} mapped pcs in one entry (at most {MAX_PC_MAP})",
                entry.pc_map.len()
            ));
        }
        let end = match entry.size {
            0 => u64::MAX,
            size => entry.start.checked_add(size).ok_or_else(|| {
                format!(
                    "code at {:#x} of {size} bytes wraps around the address space",
                    entry.start
                )
            })?,
        };
        let mut pc_map = Vec::with_capacity(entry.pc_map.len());
        for point in &entry.pc_map {
            // Cog maps a send to its return address, which may be the code's last byte + 1.
            if point.mcpc < entry.start || point.mcpc > end {
                return Err(format!(
                    "{}: mapped pc {:#x} outside its code [{:#x}, {:#x})",
                    entry.name, point.mcpc, entry.start, end
                ));
            }
            if point.inlined.len() > MAX_INLINE_DEPTH {
                return Err(format!(
                    "{}: an inline stack of {} frames (at most {MAX_INLINE_DEPTH})",
                    entry.name,
                    point.inlined.len()
                ));
            }
            pc_map.push(PcPoint {
                offset: point.mcpc - entry.start,
                bcpc: point.bcpc,
                inlined: point
                    .inlined
                    .iter()
                    .map(|f| (truncate(&f.method, MAX_NAME_BYTES), f.bcpc))
                    .collect(),
                lines: Vec::new(),
            });
        }
        pc_map.sort_by_key(|p| p.offset);
        let kind = code_kind(entry.kind);
        let mut name = entry.name.clone();
        if kind == CodeKind::ClosedPic && !entry.cases.is_empty() {
            // The cases are part of what a closed PIC is; they tell PICs of one selector apart.
            let classes: Vec<&str> = entry.cases.iter().map(|c| c.class_name.as_str()).collect();
            name = format!("{name} [{}]", truncate(&classes.join(", "), 256));
        }
        Ok(Code {
            pc_map,
            ..Code::named(kind, name, CodeSource::Vm(self.vm.clone()))
        })
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use vmscope_proto::v1::{
        self as pb, CodeEntry, CodeFree, CodeMove, CodeZone, Hello, InlinedFrame, PcMapping, Sync,
    };

    use super::*;

    fn event(ts: u64, body: Event) -> CodeMapEvent {
        CodeMapEvent {
            timestamp_ns: ts,
            event: Some(body),
        }
    }

    fn hello() -> CodeMapEvent {
        event(
            1,
            Event::Hello(Hello {
                pid: 42,
                vm: "jitvm 0.1".into(),
            }),
        )
    }

    fn load(ts: u64, start: u64, size: u64, pcs: &[(u64, u32)]) -> CodeMapEvent {
        event(
            ts,
            Event::Load(CodeEntry {
                kind: pb::CodeKind::Method as i32,
                name: "Integer>>benchFib".into(),
                start,
                size,
                pc_map: pcs
                    .iter()
                    .map(|&(mcpc, bcpc)| PcMapping {
                        mcpc,
                        bcpc,
                        inlined: Vec::new(),
                    })
                    .collect(),
                cases: Vec::new(),
            }),
        )
    }

    #[test]
    fn events_become_changes_with_relative_pc_maps() {
        let store = CodeStore::new();
        let mut p = Publication::default();
        assert_eq!(
            p.accept(&hello(), &store),
            Ok(Accepted::Stat(1, StatEvent::Vm("jitvm 0.1".into())))
        );
        assert_eq!((p.vm.as_str(), p.hello_pid), ("jitvm 0.1", Some(42)));
        let Ok(Accepted::Change(10, Change::Load { start, size, code })) =
            p.accept(&load(10, 0x1000, 0x80, &[(0x1040, 7), (0x1010, 3)]), &store)
        else {
            panic!("a load");
        };
        assert_eq!((start, size), (0x1000, Some(0x80)));
        let code = store.get(code).unwrap();
        let offsets: Vec<(u64, u32)> = code.pc_map.iter().map(|p| (p.offset, p.bcpc)).collect();
        assert_eq!(offsets, [(0x10, 3), (0x40, 7)], "sorted, relative");
        assert_eq!(code.source, CodeSource::Vm("jitvm 0.1".into()));
        // The same method loaded elsewhere is the same code.
        let Ok(Accepted::Change(_, Change::Load { code: again, .. })) =
            p.accept(&load(11, 0x5000, 0x80, &[(0x5010, 3), (0x5040, 7)]), &store)
        else {
            panic!("a load");
        };
        assert_eq!(store.get(again), Some(code));
        assert_eq!(
            p.accept(&event(12, Event::Move(CodeMove { from: 1, to: 2 })), &store),
            Ok(Accepted::Change(12, Change::Move { from: 1, to: 2 }))
        );
        assert_eq!(
            p.accept(&event(13, Event::Free(CodeFree { start: 2 })), &store),
            Ok(Accepted::Change(13, Change::Free { start: 2 }))
        );
        assert_eq!(
            p.accept(&event(14, Event::Sync(Sync {})), &store),
            Ok(Accepted::Nothing)
        );
        assert_eq!(p.until_ns, 14);
        assert_eq!((p.accepted, p.refused), (6, 0));
    }

    #[test]
    fn rule_breakers_are_refused_one_by_one() {
        let store = CodeStore::new();
        let mut p = Publication::default();
        let refused =
            |p: &mut Publication, e: CodeMapEvent| p.accept(&e, &store).unwrap_err().problem;
        assert!(
            refused(&mut p, load(5, 0x1000, 0x10, &[])).contains("first event must be a Hello")
        );
        p.accept(&hello(), &store).unwrap();
        assert!(refused(&mut p, load(0, 0x1000, 0x10, &[])).contains("without a timestamp"));
        p.accept(&load(100, 0x1000, 0x10, &[]), &store).unwrap();
        assert!(refused(&mut p, load(99, 0x1000, 0x10, &[])).contains("went backwards"));
        assert!(
            refused(&mut p, load(101, 0x1000, 0x10, &[(0x2000, 1)])).contains("outside its code")
        );
        assert!(refused(&mut p, load(101, u64::MAX - 4, 0x10, &[])).contains("wraps around"));
        let zone = event(
            102,
            Event::Zone(CodeZone {
                start: 0x2000,
                free_start: 0x1000,
                end: 0x3000,
            }),
        );
        assert!(refused(&mut p, zone).contains("out of order"));
        let mut deep = load(103, 0x1000, 0x10, &[(0x1004, 1)]);
        if let Some(Event::Load(entry)) = &mut deep.event {
            entry.pc_map[0].inlined = vec![
                InlinedFrame {
                    method: "m".into(),
                    bcpc: 0
                };
                MAX_INLINE_DEPTH + 1
            ];
        }
        assert!(refused(&mut p, deep).contains("inline stack"));
        assert_eq!(p.refused, 7);
        assert_eq!(p.problems.len(), 7);
        // And the publication goes on.
        assert!(matches!(
            p.accept(&load(104, 0x1000, 0x10, &[]), &store),
            Ok(Accepted::Change(..))
        ));
    }

    #[test]
    fn statistics_share_the_order_in_time_and_are_refused_with_their_reason() {
        use vmscope_proto::v1::{CounterValue, IntervalBegin, IntervalEnd, IntervalKind};
        let store = CodeStore::new();
        let mut p = Publication::default();
        p.accept(&hello(), &store).unwrap();
        let counter = |ts, value| {
            event(
                ts,
                Event::Counter(CounterValue {
                    name: "sends".into(),
                    unit: String::new(),
                    value,
                }),
            )
        };
        assert_eq!(
            p.accept(&counter(10, 5), &store),
            Ok(Accepted::Stat(
                10,
                StatEvent::Counter {
                    name: "sends".into(),
                    unit: String::new(),
                    value: 5
                }
            ))
        );
        let reason = |p: &mut Publication, e| p.accept(&e, &store).unwrap_err().reason;
        assert_eq!(reason(&mut p, counter(9, 6)), Reason::TimeBackwards);
        assert_eq!(reason(&mut p, counter(11, 4)), Reason::Invalid);
        let end = event(
            12,
            Event::End(IntervalEnd {
                kind: IntervalKind::Scavenge as i32,
                name: String::new(),
                id: 3,
            }),
        );
        assert_eq!(reason(&mut p, end), Reason::Unmatched);
        let unknown = event(
            12,
            Event::Begin(IntervalBegin {
                kind: 42,
                name: String::new(),
                id: 3,
            }),
        );
        assert_eq!(reason(&mut p, unknown), Reason::UnknownKind);
        let future = counter(sys::monotonic_ns() + 60_000_000_000, 7);
        assert_eq!(reason(&mut p, future), Reason::Unapplicable);
        let future = load(sys::monotonic_ns() + 60_000_000_000, 0x1000, 0x10, &[]);
        assert_eq!(reason(&mut p, future), Reason::Unapplicable);
        assert_eq!(p.until_ns, 10, "refused, it moved no time on");
        assert_eq!((p.accepted, p.refused), (2, 6));
    }

    /// A load past its owner's share of the code store is refused as store-full, not as a
    /// broken rule: the VM did nothing wrong, and `code_map_refused_store_full` must say so.
    #[test]
    fn a_load_past_the_owners_share_is_refused_as_store_full() {
        let store = CodeStore::with_shares(crate::shares::ShareLimits {
            per_user: 1,
            non_root: 1 << 20,
            total: 1 << 30,
        });
        let mut p = Publication::owned_by(1000);
        p.accept(&hello(), &store).unwrap();
        let refused = p
            .accept(&load(10, 0x1000, 0x80, &[(0x1010, 3)]), &store)
            .unwrap_err();
        assert_eq!(refused.reason, Reason::StoreFull, "{}", refused.problem);
        assert!(
            refused.problem.contains("uid 1000 holds its share"),
            "{}",
            refused.problem
        );
        assert_eq!((p.accepted, p.refused), (1, 1));
    }

    /// A VM that breaks off mid-collection: the publication's close ends what it left open,
    /// at the time it was known up to, and counts each as a begin without its end.
    #[test]
    fn a_closing_publication_ends_the_intervals_it_left_open() {
        use vmscope_model::IntervalKind;
        use vmscope_proto::v1::{IntervalBegin, IntervalEnd, IntervalKind as Kind};
        let store = CodeStore::new();
        let mut p = Publication::default();
        p.accept(&hello(), &store).unwrap();
        let begin = |ts, kind: Kind, name: &str, id| {
            event(
                ts,
                Event::Begin(IntervalBegin {
                    kind: kind as i32,
                    name: name.into(),
                    id,
                }),
            )
        };
        for e in [
            begin(10, Kind::Named, "JIT compile", 1),
            begin(20, Kind::Scavenge, "", 4),
            begin(30, Kind::Safepoint, "", 2),
        ] {
            assert!(matches!(p.accept(&e, &store), Ok(Accepted::Stat(..))));
        }
        let end = event(
            40,
            Event::End(IntervalEnd {
                kind: Kind::Safepoint as i32,
                name: String::new(),
                id: 2,
            }),
        );
        assert!(matches!(p.accept(&end, &store), Ok(Accepted::Stat(..))));
        p.accept(&event(55, Event::Sync(Sync {})), &store).unwrap();
        let ends = p.close();
        assert_eq!(
            ends,
            [
                (
                    55,
                    StatEvent::End {
                        kind: IntervalKind::Scavenge,
                        id: 4
                    }
                ),
                (
                    55,
                    StatEvent::End {
                        kind: IntervalKind::Named("JIT compile".into()),
                        id: 1
                    }
                ),
            ]
        );
        assert_eq!(p.refused, 2);
        assert!(p.close().is_empty(), "closed once");
    }

    /// A kind a publication gives is the kind the profile shows (and the API carries back);
    /// none, or one this daemon does not know, is unknown.
    #[test]
    fn code_kinds_come_back_as_published() {
        for kind in 1..=8 {
            assert_eq!(
                vmscope_proto::model::code_kind(Some(code_kind(kind))) as i32,
                kind
            );
        }
        for unknown in [0, 9, -1] {
            assert_eq!(code_kind(unknown), CodeKind::Unknown);
        }
    }
}
