//! Replaying a code log: which code occupied which addresses when, checked against the rules
//! of `codemap.proto`.
//!
//! This is what tests hold the daemon's attribution against: [`History::lookup`] answers,
//! for an address and a CLOCK_MONOTONIC time, the entry the VM had there then. [`replay`]
//! also checks the log: Hello first, timestamps that never go back, loads that overlap no
//! live entry, moves from live entries to free space, frees of live entries, pc maps sorted
//! and inside their entries, PIC cases that target live methods, everything inside the zone.

use std::collections::BTreeMap;

use vmscope_proto::v1::code_map_event::Event;
use vmscope_proto::v1::{CodeEntry, CodeKind, CodeMapEvent, PcMapping};

/// Where a piece of code was, and when.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The entry as loaded (its pc map shifted to `start` if it moved).
    pub entry: CodeEntry,
    /// Where it was during [from, until).
    pub start: u64,
    /// Time it arrived here (load or move).
    pub from: u64,
    /// Time it left (move or free); `u64::MAX` if still there at the end of the log.
    pub until: u64,
    /// How many times this code had moved before arriving here.
    pub moves: u32,
}

impl Placement {
    /// The entry's kind.
    pub fn kind(&self) -> CodeKind {
        CodeKind::try_from(self.entry.kind).unwrap_or(CodeKind::Unspecified)
    }

    /// Whether `addr` is inside.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.start + self.entry.size).contains(&addr)
    }

    /// Whether it is a decoy (a method compiled never to run).
    pub fn is_decoy(&self) -> bool {
        self.entry.name.starts_with("Decoy>>")
    }
}

/// Everything a log says.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The publisher's pid (from the Hello).
    pub pid: u32,
    /// Every placement, in the order they began.
    pub placements: Vec<Placement>,
    /// Number of loads, moves and frees.
    pub loads: usize,
    /// Moves.
    pub moves: usize,
    /// Frees.
    pub frees: usize,
    /// The last zone: (start, free start, end).
    pub zone: Option<(u64, u64, u64)>,
    /// Zone events.
    pub zones: usize,
}

impl History {
    /// The placement covering `addr` at time `ts`.
    pub fn lookup(&self, addr: u64, ts: u64) -> Option<&Placement> {
        self.placements
            .iter()
            .find(|p| p.from <= ts && ts < p.until && p.contains(addr))
    }

    /// Placements of entries named `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Placement> + 'a {
        self.placements.iter().filter(move |p| p.entry.name == name)
    }

    /// Addresses where a non-decoy method started that later became the start of a decoy:
    /// (address, the method, the decoy).
    pub fn decoys_on_method_starts(&self) -> Vec<(u64, String, String)> {
        let mut found = Vec::new();
        for d in self.placements.iter().filter(|p| p.is_decoy()) {
            if let Some(m) = self.placements.iter().find(|m| {
                m.start == d.start
                    && !m.is_decoy()
                    && m.kind() == CodeKind::Method
                    && m.until <= d.from
            }) {
                found.push((d.start, m.entry.name.clone(), d.entry.name.clone()));
            }
        }
        found
    }
}

fn shift(map: &[PcMapping], delta: i128) -> Vec<PcMapping> {
    map.iter()
        .map(|m| PcMapping {
            mcpc: u64::try_from(i128::from(m.mcpc) + delta).unwrap_or(0),
            ..m.clone()
        })
        .collect()
}

/// Replays `events`, checking the rules; the first violation is the error.
pub fn replay(events: &[CodeMapEvent]) -> Result<History, String> {
    let mut h = History::default();
    // Live placements by start: index into h.placements.
    let mut live: BTreeMap<u64, usize> = BTreeMap::new();
    let mut last_ts = 0;
    let overlaps =
        |live: &BTreeMap<u64, usize>, h: &History, s: u64, size: u64| -> Option<String> {
            let end = s + size;
            live.range(..end)
                .next_back()
                .map(|(_, &i)| &h.placements[i])
                .filter(|p| p.start + p.entry.size > s)
                .map(|p| format!("{} at {:#x}+{}", p.entry.name, p.start, p.entry.size))
        };
    for (i, ev) in events.iter().enumerate() {
        let ts = ev.timestamp_ns;
        let at = |what: String| format!("event {i} (t={ts}): {what}");
        if ts < last_ts {
            return Err(at(format!("timestamp goes back from {last_ts}")));
        }
        last_ts = ts;
        let Some(event) = &ev.event else {
            return Err(at("no event".into()));
        };
        if i == 0 && !matches!(event, Event::Hello(_)) {
            return Err(at("the first event is not a Hello".into()));
        }
        match event {
            Event::Hello(hello) => {
                if i != 0 {
                    return Err(at("Hello after the first event".into()));
                }
                h.pid = hello.pid;
            }
            Event::Zone(z) => {
                if !(z.start <= z.free_start && z.free_start <= z.end) {
                    return Err(at(format!("zone {z:?} out of order")));
                }
                for &p in live.values() {
                    let p = &h.placements[p];
                    if p.start < z.start || p.start + p.entry.size > z.free_start {
                        return Err(at(format!(
                            "{} at {:#x} outside the zone {z:?}",
                            p.entry.name, p.start
                        )));
                    }
                }
                h.zone = Some((z.start, z.free_start, z.end));
                h.zones += 1;
            }
            Event::Load(e) => {
                if e.size == 0 {
                    return Err(at(format!("{} has size 0", e.name)));
                }
                if let Some((zs, free, _)) = h.zone
                    && (e.start < zs || e.start + e.size > free)
                {
                    return Err(at(format!("{} at {:#x} outside the zone", e.name, e.start)));
                }
                if let Some(o) = overlaps(&live, &h, e.start, e.size) {
                    return Err(at(format!(
                        "load of {} at {:#x} overlaps live {o}",
                        e.name, e.start
                    )));
                }
                if e.pc_map.windows(2).any(|w| w[0].mcpc >= w[1].mcpc) {
                    return Err(at(format!("pc map of {} not sorted", e.name)));
                }
                if let Some(m) = e
                    .pc_map
                    .iter()
                    .find(|m| !(e.start..e.start + e.size).contains(&m.mcpc))
                {
                    return Err(at(format!("{} mcpc {:#x} outside it", e.name, m.mcpc)));
                }
                for c in &e.cases {
                    let target = live
                        .range(..=c.target)
                        .next_back()
                        .map(|(_, &p)| &h.placements[p]);
                    if !target.is_some_and(|t| t.contains(c.target) && t.kind() == CodeKind::Method)
                    {
                        return Err(at(format!(
                            "PIC {} case {} targets no live method",
                            e.name, c.class_name
                        )));
                    }
                }
                live.insert(e.start, h.placements.len());
                h.placements.push(Placement {
                    entry: e.clone(),
                    start: e.start,
                    from: ts,
                    until: u64::MAX,
                    moves: 0,
                });
                h.loads += 1;
            }
            Event::Move(m) => {
                let Some(p) = live.remove(&m.from) else {
                    return Err(at(format!("move from {:#x}, where no entry lives", m.from)));
                };
                h.placements[p].until = ts;
                let old = h.placements[p].clone();
                if let Some(o) = overlaps(&live, &h, m.to, old.entry.size) {
                    return Err(at(format!(
                        "{} moved to {:#x} over live {o}",
                        old.entry.name, m.to
                    )));
                }
                let mut entry = old.entry.clone();
                entry.pc_map = shift(&entry.pc_map, i128::from(m.to) - i128::from(m.from));
                live.insert(m.to, h.placements.len());
                h.placements.push(Placement {
                    entry,
                    start: m.to,
                    from: ts,
                    until: u64::MAX,
                    moves: old.moves + 1,
                });
                h.moves += 1;
            }
            Event::Free(f) => {
                let Some(p) = live.remove(&f.start) else {
                    return Err(at(format!("free of {:#x}, where no entry lives", f.start)));
                };
                h.placements[p].until = ts;
                h.frees += 1;
            }
            // The VM's statistics: no part of its code map.
            Event::Sync(_)
            | Event::Configuration(_)
            | Event::Counter(_)
            | Event::Gauge(_)
            | Event::Begin(_)
            | Event::End(_)
            | Event::CounterRegion(_)
            | Event::CounterValues(_)
            | Event::ThreadCounter(_)
            | Event::ThreadLabels(_)
            | Event::LabelSet(_)
            | Event::DomainEvent(_) => {}
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscope_proto::v1::{CodeFree, CodeMove, CodeZone, Hello};

    fn ev(ts: u64, e: Event) -> CodeMapEvent {
        CodeMapEvent {
            timestamp_ns: ts,
            event: Some(e),
        }
    }

    fn load(name: &str, start: u64, size: u64) -> Event {
        Event::Load(CodeEntry {
            kind: CodeKind::Method as i32,
            name: name.into(),
            start,
            size,
            pc_map: vec![PcMapping {
                mcpc: start + 1,
                bcpc: 3,
                inlined: vec![],
            }],
            cases: vec![],
        })
    }

    #[test]
    fn replays_and_looks_up_by_time() {
        let hello = ev(
            1,
            Event::Hello(Hello {
                pid: 7,
                vm: "t".into(),
            }),
        );
        let zone = ev(
            2,
            Event::Zone(CodeZone {
                start: 0,
                free_start: 300,
                end: 1000,
            }),
        );
        let log = vec![
            hello.clone(),
            zone.clone(),
            ev(3, load("A>>a", 0, 100)),
            ev(4, load("B>>b", 100, 100)),
            ev(5, Event::Free(CodeFree { start: 0 })),
            ev(6, Event::Move(CodeMove { from: 100, to: 0 })),
            ev(7, load("Decoy>>decoy0", 100, 50)),
        ];
        let h = replay(&log).unwrap();
        assert_eq!((h.pid, h.loads, h.moves, h.frees), (7, 3, 1, 1));
        assert_eq!(h.lookup(50, 4).unwrap().entry.name, "A>>a");
        assert_eq!(h.lookup(50, 6).unwrap().entry.name, "B>>b");
        assert_eq!(h.lookup(150, 6).map(|p| p.entry.name.as_str()), None);
        assert_eq!(h.lookup(1, 6).unwrap().entry.pc_map[0].mcpc, 1);
        assert_eq!(
            h.decoys_on_method_starts(),
            vec![(100, "B>>b".into(), "Decoy>>decoy0".into())]
        );

        let bad = |events: Vec<CodeMapEvent>| replay(&events).unwrap_err();
        assert!(bad(vec![zone.clone()]).contains("first event"));
        assert!(
            bad(vec![
                hello.clone(),
                ev(3, load("A", 0, 10)),
                ev(4, load("B", 5, 10))
            ])
            .contains("overlaps")
        );
        assert!(
            bad(vec![
                hello.clone(),
                ev(3, Event::Free(CodeFree { start: 9 }))
            ])
            .contains("no entry")
        );
        assert!(
            bad(vec![
                hello.clone(),
                ev(3, load("A", 0, 10)),
                ev(2, load("B", 50, 10))
            ])
            .contains("back")
        );
        assert!(
            bad(vec![hello.clone(), zone, ev(3, load("A", 400, 10))]).contains("outside the zone")
        );
        assert!(bad(vec![hello, ev(3, load("A", 0, 1))]).contains("mcpc"));
    }
}
