//! What a VM publishes of its own statistics beside its code map (`codemap.proto`'s
//! Configuration, CounterValue, GaugeValue, IntervalBegin and IntervalEnd), and what a
//! session makes of them over its window: VMProfiler's header, Memory, GCs, Compiled Code
//! Compactions and the VM's Events.
//!
//! Counters and gauges are levels sampled by the VM when it sees fit, so a window keeps two
//! readings of each: the last one before its start (the baseline) and the last one inside it.
//! Intervals are begin/end pairs; a window adds up the part of each inside it. A window is
//! fed events as they are published, in each publication's time order, and never holds more
//! than one entry per name, kind and open interval: a session of hours costs what one of
//! seconds does.
//!
//! A session that starts while a VM publishes takes over its state ([`VmState::window`]):
//! every counter's last value becomes the baseline and the intervals open then stay open.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use vmscope_model::{
    ConfigValue, Configuration, CounterDelta, GaugeDelta, IntervalKind, IntervalTotals, Label,
    VmStatistics,
};
use vmscope_proto::v1::{self as pb, IntervalKind as PbKind};

use super::{
    counters::{CountKind, CountWindow, CounterRegion, MAX_COUNTERS, MAX_REGIONS, MAX_STRIDE},
    domain_events::EventWindow,
    intervals::{During, IntervalLog},
};

/// Most distinct names (configuration, counters and gauges together) one publication may
/// use: a VM reports tens; a publisher inventing names is refused past this.
pub const MAX_NAMES: usize = 256;
/// Most kinds of interval a VM may name itself (`INTERVAL_KIND_NAMED`).
pub const MAX_NAMED_KINDS: usize = 16;
/// Most intervals open at once in one publication.
pub const MAX_OPEN_INTERVALS: usize = 1024;
/// Longest name of a statistic or a kind, and longest unit or text value.
pub const MAX_NAME_BYTES: usize = 128;
/// Most threads of one publication whose send counters the sampler reads at once
/// (`ThreadCounter`).
pub const MAX_THREAD_COUNTERS: usize = 1024;
/// Most labels in one set (`LabelSet`).
pub const MAX_LABELS: usize = 8;
/// Longest label key.
pub const MAX_LABEL_KEY_BYTES: usize = 64;
/// Longest label value.
pub const MAX_LABEL_VALUE_BYTES: usize = 128;
/// Most label sets one process publishes.
pub const MAX_LABEL_SETS: usize = 4096;
/// Longest domain event type.
pub const MAX_EVENT_TYPE_BYTES: usize = 128;
/// Most frames a domain event names.
pub const MAX_EVENT_FRAMES: usize = 64;
/// Longest frame name of a domain event.
pub const MAX_EVENT_FRAME_BYTES: usize = 256;

/// The kind of a published interval, or why there is none: a kind of the VM's own may not be
/// nameless, nor take the name of one of the protocol's.
pub fn interval_kind_from_proto(kind: i32, name: &str) -> Result<IntervalKind, (Broken, String)> {
    let invalid = |e: String| (Broken::Invalid, e);
    match PbKind::try_from(kind) {
        Ok(PbKind::Scavenge) => Ok(IntervalKind::Scavenge),
        Ok(PbKind::FullGc) => Ok(IntervalKind::FullGc),
        Ok(PbKind::CodeCompaction) => Ok(IntervalKind::CodeCompaction),
        Ok(PbKind::Safepoint) => Ok(IntervalKind::Safepoint),
        Ok(PbKind::Named) if name.is_empty() => Err(invalid(
            "an interval of INTERVAL_KIND_NAMED without a name".into(),
        )),
        // Reports and pprof labels name kinds by these keys: a kind of the VM's own under one
        // of them could not be told from the protocol's.
        Ok(PbKind::Named) if IntervalKind::PROTOCOL.iter().any(|k| k.key() == name) => {
            Err(invalid(format!(
                "an interval of INTERVAL_KIND_NAMED named {name:?}, the key of a kind the \
                 protocol has: publish it as that kind"
            )))
        }
        Ok(PbKind::Named) => Ok(IntervalKind::Named(
            checked_name(name, "interval kind").map_err(invalid)?,
        )),
        Ok(PbKind::Unspecified) => Err(invalid("an interval without a kind".into())),
        Err(_) => Err((
            Broken::UnknownKind,
            format!("an interval of unknown kind {kind}"),
        )),
    }
}

/// One statistics event, checked ([`super::super::codemap::vm::Publication`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatEvent {
    /// The VM's name, from its Hello.
    Vm(String),
    /// A setting.
    Configuration {
        /// Its name.
        name: String,
        /// Its value.
        value: ConfigValue,
        /// Unit of a number.
        unit: String,
    },
    /// A monotonic count.
    Counter {
        /// Its name.
        name: String,
        /// What one is.
        unit: String,
        /// The count.
        value: u64,
    },
    /// A level.
    Gauge {
        /// Its name.
        name: String,
        /// Its unit.
        unit: String,
        /// The level.
        value: i64,
    },
    /// Work of a kind began.
    Begin {
        /// The kind.
        kind: IntervalKind,
        /// Tells apart intervals of the kind open at once.
        id: u64,
    },
    /// Work begun ended.
    End {
        /// The kind.
        kind: IntervalKind,
        /// As its begin's.
        id: u64,
    },
    /// Counters in the VM's memory, for the daemon to read.
    Region(Arc<CounterRegion>),
    /// A region's values, as the VM read them (as it exits).
    RegionValues {
        /// The region's id.
        region: u32,
        /// Its values.
        values: Vec<u64>,
    },
    /// Where a thread keeps its send counter, for the sampler to read with its samples; 0: no
    /// longer. The manager hands it to the kernel (it is no statistic of a window).
    ThreadCounter {
        /// The thread.
        tid: u32,
        /// The counter's address in the VM's memory, or 0.
        address: u64,
        /// The publisher's uid (its share of the kernel's map is counted by it); the
        /// publication sets it, the rules leave it 0.
        owner: u32,
    },
    /// Where a thread keeps the id of its current label set, for the sampler to read with its
    /// samples; 0: no longer. Handed to the kernel as [`StatEvent::ThreadCounter`] is.
    ThreadLabels {
        /// The thread.
        tid: u32,
        /// The word's address in the VM's memory, or 0.
        address: u64,
        /// As [`StatEvent::ThreadCounter`]'s.
        owner: u32,
    },
    /// A set of labels under the id its threads store: the same set for the process's life.
    LabelSet {
        /// Its id, never 0.
        id: u64,
        /// Its labels, in key order, each key once.
        labels: Arc<[Label]>,
    },
    /// An event of the program's domain.
    Domain(Arc<DomainEvent>),
}

/// An event of a program's domain, as its VM published it (`codemap.proto`'s `DomainEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainEvent {
    /// What happened.
    pub kind: String,
    /// The object it happened to, by the VM's stable id; 0: none.
    pub object: u64,
    /// The thread that emitted it; 0: unknown.
    pub tid: u32,
    /// What emitted it, innermost first; empty when the VM does not say.
    pub frames: Vec<String>,
}

/// A name or unit the protocol accepts: at most [`MAX_NAME_BYTES`].
pub fn checked_name(name: &str, what: &str) -> Result<String, String> {
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "a {what} of {} bytes (at most {MAX_NAME_BYTES})",
            name.len()
        ));
    }
    Ok(name.to_owned())
}

/// Checks a thread word's publication (`ThreadCounter`, `ThreadLabels`) against `published`,
/// the threads with one now, which it keeps: a thread of its own, an aligned word, at most
/// [`MAX_THREAD_COUNTERS`] threads.
fn thread_word(
    published: &mut HashSet<u32>,
    tid: u32,
    address: u64,
    what: &str,
) -> Result<(), (Broken, String)> {
    let invalid = |e: String| (Broken::Invalid, e);
    if tid == 0 {
        return Err(invalid(format!("a thread {what} of thread 0")));
    }
    if address == 0 {
        published.remove(&tid);
    } else if !address.is_multiple_of(8) || address.checked_add(8).is_none() {
        return Err(invalid(format!(
            "thread {tid}'s {what} at {address:#x}, not an aligned 8-byte word"
        )));
    } else if !published.contains(&tid) && published.len() >= MAX_THREAD_COUNTERS {
        return Err((
            Broken::TooMany,
            format!("more than {MAX_THREAD_COUNTERS} threads with a {what}"),
        ));
    } else {
        published.insert(tid);
    }
    Ok(())
}

/// A published label set's labels, in key order, or why it breaks the protocol.
fn checked_labels(set: &pb::LabelSet) -> Result<Vec<Label>, (Broken, String)> {
    let invalid = |e: String| (Broken::Invalid, e);
    if set.id == 0 {
        return Err(invalid("label set 0 (0 is no labels)".into()));
    }
    if set.labels.len() > MAX_LABELS {
        return Err(invalid(format!(
            "label set {} of {} labels (at most {MAX_LABELS})",
            set.id,
            set.labels.len()
        )));
    }
    let mut labels: Vec<Label> = Vec::with_capacity(set.labels.len());
    for l in &set.labels {
        if l.key.is_empty() || l.key.len() > MAX_LABEL_KEY_BYTES {
            return Err(invalid(format!(
                "a label key of {} bytes (1 to {MAX_LABEL_KEY_BYTES})",
                l.key.len()
            )));
        }
        if l.value.is_empty() || l.value.len() > MAX_LABEL_VALUE_BYTES {
            return Err(invalid(format!(
                "label {:?}'s value of {} bytes (1 to {MAX_LABEL_VALUE_BYTES})",
                l.key,
                l.value.len()
            )));
        }
        labels.push(Label::new(l.key.clone(), l.value.clone()));
    }
    labels.sort();
    if let Some(twice) = labels.windows(2).find(|w| w[0].key == w[1].key) {
        return Err(invalid(format!(
            "label set {} has key {:?} twice",
            set.id, twice[0].key
        )));
    }
    Ok(labels)
}

/// Why a statistics event breaks the protocol, beyond its shape: the daemon counts these
/// apart (`code_map_refused_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// An interval kind the daemon does not know.
    UnknownKind,
    /// An end without its begin, or a begin of an interval already open.
    Unmatched,
    /// Past the publication's bounds on names, named kinds or open intervals.
    TooMany,
    /// Anything else: an empty or over-long name, a counter going down.
    Invalid,
}

/// The rules one publication's statistics keep: checked as they come, so that what reaches
/// the sessions is well-formed (every end has its begin, counters never go down).
#[derive(Debug, Default)]
pub struct Rules {
    /// Names used so far (configuration, counters, gauges), with a counter's last value.
    names: HashMap<String, Option<u64>>,
    named_kinds: Vec<String>,
    open: HashSet<(IntervalKind, u64)>,
    /// Counter regions published, by id, with their number of counters.
    regions: HashMap<u32, usize>,
    /// Threads with a send counter published now.
    thread_counters: HashSet<u32>,
    /// Threads with a label word published now.
    thread_labels: HashSet<u32>,
    /// Label sets published, by id (an id means one set for the process's life).
    label_sets: HashMap<u64, Arc<[Label]>>,
}

impl Rules {
    /// Checks a statistics event of the proto; returns it in the daemon's terms.
    pub fn check(
        &mut self,
        event: &pb::code_map_event::Event,
    ) -> Result<StatEvent, (Broken, String)> {
        use pb::code_map_event::Event;
        let invalid = |e: String| (Broken::Invalid, e);
        match event {
            Event::Configuration(c) => {
                self.name(&c.name, None)?;
                let value = match &c.value {
                    Some(pb::configuration::Value::Number(n)) => ConfigValue::Number(*n),
                    Some(pb::configuration::Value::Text(t)) => {
                        ConfigValue::Text(checked_name(t, "configuration text").map_err(invalid)?)
                    }
                    None => {
                        return Err(invalid(format!(
                            "configuration {:?} without a value",
                            c.name
                        )));
                    }
                };
                Ok(StatEvent::Configuration {
                    name: c.name.clone(),
                    value,
                    unit: checked_name(&c.unit, "unit").map_err(invalid)?,
                })
            }
            Event::Counter(c) => {
                self.name(&c.name, Some(c.value))?;
                Ok(StatEvent::Counter {
                    name: c.name.clone(),
                    unit: checked_name(&c.unit, "unit").map_err(invalid)?,
                    value: c.value,
                })
            }
            Event::Gauge(g) => {
                self.name(&g.name, None)?;
                Ok(StatEvent::Gauge {
                    name: g.name.clone(),
                    unit: checked_name(&g.unit, "unit").map_err(invalid)?,
                    value: g.value,
                })
            }
            Event::Begin(b) => {
                let kind = self.kind(b.kind, &b.name)?;
                if self.open.len() >= MAX_OPEN_INTERVALS {
                    return Err((
                        Broken::TooMany,
                        format!("more than {MAX_OPEN_INTERVALS} intervals open at once"),
                    ));
                }
                if !self.open.insert((kind.clone(), b.id)) {
                    return Err((
                        Broken::Unmatched,
                        format!("a begin of {kind:?} {} while it is open already", b.id),
                    ));
                }
                Ok(StatEvent::Begin { kind, id: b.id })
            }
            Event::End(e) => {
                let kind = self.kind(e.kind, &e.name)?;
                if !self.open.remove(&(kind.clone(), e.id)) {
                    return Err((
                        Broken::Unmatched,
                        format!("an end of {kind:?} {} that never began", e.id),
                    ));
                }
                Ok(StatEvent::End { kind, id: e.id })
            }
            Event::CounterRegion(r) => {
                if self.regions.contains_key(&r.id) {
                    return Err(invalid(format!("counter region {} published twice", r.id)));
                }
                if self.regions.len() >= MAX_REGIONS {
                    return Err((
                        Broken::TooMany,
                        format!("more than {MAX_REGIONS} counter regions"),
                    ));
                }
                let kind = match pb::CounterKind::try_from(r.kind) {
                    Ok(pb::CounterKind::Activations) => CountKind::Activations,
                    Ok(pb::CounterKind::Unspecified) => {
                        return Err(invalid("a counter region without a kind".into()));
                    }
                    Err(_) => {
                        return Err((
                            Broken::UnknownKind,
                            format!("a counter region of unknown kind {}", r.kind),
                        ));
                    }
                };
                if !(8..=MAX_STRIDE).contains(&r.stride) || r.stride % 8 != 0 {
                    return Err(invalid(format!(
                        "a counter region's stride of {} bytes (a multiple of 8 from 8 to \
                         {MAX_STRIDE})",
                        r.stride
                    )));
                }
                if r.names.is_empty() || r.names.len() > MAX_COUNTERS {
                    return Err(invalid(format!(
                        "a counter region of {} counters (1 to {MAX_COUNTERS})",
                        r.names.len()
                    )));
                }
                let span = (r.names.len() as u64 - 1) * u64::from(r.stride) + 8;
                if r.address == 0 || r.address.checked_add(span).is_none() {
                    return Err(invalid(format!(
                        "a counter region at {:#x} of {span} bytes",
                        r.address
                    )));
                }
                let names = r
                    .names
                    .iter()
                    .map(|n| checked_name(n, "counter name"))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(invalid)?;
                self.regions.insert(r.id, names.len());
                Ok(StatEvent::Region(Arc::new(CounterRegion {
                    id: r.id,
                    kind,
                    address: r.address,
                    stride: r.stride,
                    names,
                })))
            }
            Event::CounterValues(v) => match self.regions.get(&v.region) {
                None => Err((
                    Broken::Unmatched,
                    format!("values of counter region {}, never published", v.region),
                )),
                Some(&n) if n != v.values.len() => Err(invalid(format!(
                    "{} values of counter region {}, which has {n} counters",
                    v.values.len(),
                    v.region
                ))),
                Some(_) => Ok(StatEvent::RegionValues {
                    region: v.region,
                    values: v.values.clone(),
                }),
            },
            Event::ThreadCounter(t) => {
                thread_word(&mut self.thread_counters, t.tid, t.address, "counter")?;
                Ok(StatEvent::ThreadCounter {
                    tid: t.tid,
                    address: t.address,
                    owner: 0,
                })
            }
            Event::ThreadLabels(t) => {
                thread_word(&mut self.thread_labels, t.tid, t.address, "label word")?;
                Ok(StatEvent::ThreadLabels {
                    tid: t.tid,
                    address: t.address,
                    owner: 0,
                })
            }
            Event::LabelSet(set) => {
                let labels = checked_labels(set)?;
                let labels = match self.label_sets.get(&set.id) {
                    Some(known) if **known != *labels => {
                        return Err(invalid(format!(
                            "label set {} published again with other labels",
                            set.id
                        )));
                    }
                    Some(known) => known.clone(),
                    None if self.label_sets.len() >= MAX_LABEL_SETS => {
                        return Err((
                            Broken::TooMany,
                            format!("more than {MAX_LABEL_SETS} label sets"),
                        ));
                    }
                    None => {
                        let labels: Arc<[Label]> = labels.into();
                        self.label_sets.insert(set.id, labels.clone());
                        labels
                    }
                };
                Ok(StatEvent::LabelSet { id: set.id, labels })
            }
            Event::DomainEvent(e) => {
                if e.r#type.is_empty() || e.r#type.len() > MAX_EVENT_TYPE_BYTES {
                    return Err(invalid(format!(
                        "a domain event type of {} bytes (1 to {MAX_EVENT_TYPE_BYTES})",
                        e.r#type.len()
                    )));
                }
                if e.frames.len() > MAX_EVENT_FRAMES {
                    return Err(invalid(format!(
                        "a domain event of {} frames (at most {MAX_EVENT_FRAMES})",
                        e.frames.len()
                    )));
                }
                if let Some(long) = e.frames.iter().find(|f| f.len() > MAX_EVENT_FRAME_BYTES) {
                    return Err(invalid(format!(
                        "a domain event frame of {} bytes (at most {MAX_EVENT_FRAME_BYTES})",
                        long.len()
                    )));
                }
                Ok(StatEvent::Domain(Arc::new(DomainEvent {
                    kind: e.r#type.clone(),
                    object: e.object,
                    tid: e.tid,
                    frames: e.frames.clone(),
                })))
            }
            _ => Err(invalid("not a statistics event".into())),
        }
    }

    /// Ends the intervals the publication left open as it closes: a VM that exits or breaks
    /// off mid-collection says no more, and its samples after must not count in it.
    pub fn close(&mut self) -> Vec<StatEvent> {
        let mut open: Vec<(IntervalKind, u64)> = self.open.drain().collect();
        open.sort_by_cached_key(|(kind, id)| (kind.rank(), kind.name().to_owned(), *id));
        open.into_iter()
            .map(|(kind, id)| StatEvent::End { kind, id })
            .collect()
    }

    /// Checks a statistic's name (and a counter's new value against its last).
    fn name(&mut self, name: &str, counter: Option<u64>) -> Result<(), (Broken, String)> {
        if name.is_empty() {
            return Err((Broken::Invalid, "a statistic without a name".into()));
        }
        checked_name(name, "statistic's name").map_err(|e| (Broken::Invalid, e))?;
        let room = self.names.len() < MAX_NAMES;
        match self.names.get_mut(name) {
            Some(last) => {
                if let (Some(before), Some(now)) = (*last, counter)
                    && now < before
                {
                    return Err((
                        Broken::Invalid,
                        format!("counter {name:?} went down from {before} to {now}"),
                    ));
                }
                if counter.is_some() {
                    *last = counter;
                }
                Ok(())
            }
            None if !room => Err((
                Broken::TooMany,
                format!("a statistic {name:?} past the {MAX_NAMES} names a publication may use"),
            )),
            None => {
                self.names.insert(name.to_owned(), counter);
                Ok(())
            }
        }
    }

    fn kind(&mut self, kind: i32, name: &str) -> Result<IntervalKind, (Broken, String)> {
        let kind = interval_kind_from_proto(kind, name)?;
        if let IntervalKind::Named(name) = &kind
            && !self.named_kinds.contains(name)
        {
            if self.named_kinds.len() >= MAX_NAMED_KINDS {
                return Err((
                    Broken::TooMany,
                    format!("an interval kind {name:?} past the {MAX_NAMED_KINDS} a VM may name"),
                ));
            }
            self.named_kinds.push(name.clone());
        }
        Ok(kind)
    }
}

/// Two readings of a counter or gauge: the last before the window, the last inside it.
#[derive(Clone, Debug)]
struct Level<V> {
    name: String,
    unit: String,
    /// The last value stamped before the window's start; for a level first published inside
    /// the window, its first value there.
    baseline: Option<(u64, V)>,
    /// The last value stamped inside the window.
    last: Option<(u64, V)>,
    /// The lowest and highest values stamped inside the window.
    inside: Option<(V, V)>,
}

impl<V: Copy + Ord> Level<V> {
    fn observe(&mut self, start_ns: u64, ts: u64, value: V) {
        if ts < start_ns {
            if self.baseline.is_none_or(|(at, _)| at <= ts) {
                self.baseline = Some((ts, value));
            }
            return;
        }
        if self.baseline.is_none() {
            self.baseline = Some((ts, value));
        }
        if self.last.is_none_or(|(at, _)| at <= ts) {
            self.last = Some((ts, value));
        }
        self.inside = Some(self.inside.map_or((value, value), |(low, high)| {
            (low.min(value), high.max(value))
        }));
    }

    /// The window's state taken over by a later window: the last value is its baseline.
    fn carried(&self) -> Level<V> {
        Level {
            name: self.name.clone(),
            unit: self.unit.clone(),
            baseline: self.last.or(self.baseline),
            last: None,
            inside: None,
        }
    }

    /// The lowest and highest values over the window: those stamped inside it, and the level
    /// it started at.
    fn range(&self) -> Option<(V, V)> {
        let (_, start) = self.baseline?;
        Some(self.inside.map_or((start, start), |(low, high)| {
            (low.min(start), high.max(start))
        }))
    }

    /// Baseline and last values (the baseline again when nothing came in the window).
    fn ends(&self) -> Option<(V, V)> {
        let (_, first) = self.baseline?;
        Some((first, self.last.map_or(first, |(_, v)| v)))
    }
}

/// Totals of one kind of interval over a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindTotals {
    /// Intervals begun in the window.
    pub count: u64,
    /// Their time inside the window, summed.
    pub total_ns: u64,
    /// The longest one begun in the window.
    pub longest_ns: u64,
}

/// One VM's statistics over a window that starts at `start_ns` and ends where the caller says.
#[derive(Clone, Debug, Default)]
pub struct Window {
    start_ns: u64,
    /// The VM's name.
    pub vm: String,
    config: Vec<(String, ConfigValue, String)>,
    counters: Vec<Level<u64>>,
    gauges: Vec<Level<i64>>,
    kinds: Vec<(IntervalKind, KindTotals)>,
    open: HashMap<(IntervalKind, u64), u64>,
    /// The VM's counter regions, and the session's values of them.
    pub counts: CountWindow,
    /// The domain events it published in the window.
    events: EventWindow,
}

impl Window {
    /// A window from `start_ns`, knowing nothing yet.
    pub fn starting(start_ns: u64) -> Window {
        Window {
            start_ns,
            ..Window::default()
        }
    }

    /// Takes an event stamped `ts`, unless it is at or after `end_ns` (a window that ended).
    pub fn apply(&mut self, ts: u64, event: &StatEvent, end_ns: Option<u64>) {
        if end_ns.is_some_and(|end| ts >= end) {
            return;
        }
        match event {
            StatEvent::Vm(vm) => {
                if !vm.is_empty() {
                    self.vm.clone_from(vm);
                }
            }
            StatEvent::Configuration { name, value, unit } => {
                let room = self.config.len() < MAX_NAMES;
                match self.config.iter_mut().find(|(n, ..)| n == name) {
                    Some(entry) => *entry = (name.clone(), value.clone(), unit.clone()),
                    None if room => self
                        .config
                        .push((name.clone(), value.clone(), unit.clone())),
                    None => {}
                }
            }
            StatEvent::Counter { name, unit, value } => {
                if let Some(level) = level(&mut self.counters, name, unit) {
                    level.observe(self.start_ns, ts, *value);
                }
            }
            StatEvent::Gauge { name, unit, value } => {
                if let Some(level) = level(&mut self.gauges, name, unit) {
                    level.observe(self.start_ns, ts, *value);
                }
            }
            StatEvent::Begin { kind, id } => {
                if self.open.len() >= MAX_OPEN_INTERVALS {
                    return;
                }
                self.open.insert((kind.clone(), *id), ts);
                let start = self.start_ns;
                if let Some(totals) = self.totals(kind)
                    && ts >= start
                {
                    totals.count += 1;
                }
            }
            StatEvent::End { kind, id } => {
                if let Some(begin) = self.open.remove(&(kind.clone(), *id)) {
                    let start = self.start_ns;
                    if let Some(totals) = self.totals(kind) {
                        add(totals, start, begin, ts);
                    }
                }
            }
            StatEvent::Region(region) => self.counts.published(region),
            StatEvent::RegionValues { region, values } => {
                self.counts.values_published(ts, *region, values);
            }
            StatEvent::ThreadCounter { .. }
            | StatEvent::ThreadLabels { .. }
            | StatEvent::LabelSet { .. } => {}
            StatEvent::Domain(event) => self.events.count(self.start_ns, ts, event),
        }
    }

    fn totals(&mut self, kind: &IntervalKind) -> Option<&mut KindTotals> {
        let at = match self.kinds.iter().position(|(k, _)| k == kind) {
            Some(at) => at,
            None if self.kinds.len() < 4 + MAX_NAMED_KINDS => {
                self.kinds.push((kind.clone(), KindTotals::default()));
                self.kinds.len() - 1
            }
            None => return None,
        };
        Some(&mut self.kinds[at].1)
    }

    /// What a window starting at `start_ns` inherits from this one, its time before that:
    /// settings, the last value of each level as baseline, and the intervals still open.
    pub fn carried(&self, start_ns: u64) -> Window {
        Window {
            start_ns,
            vm: self.vm.clone(),
            config: self.config.clone(),
            counters: self.counters.iter().map(Level::carried).collect(),
            gauges: self.gauges.iter().map(Level::carried).collect(),
            kinds: Vec::new(),
            open: self.open.clone(),
            counts: self.counts.carried(),
            events: EventWindow::default(),
        }
    }

    /// The intervals of each kind up to `end_ns`, those still open counted up to it, in the
    /// order: scavenges, full GCs, code compactions, safepoints, then named kinds as first
    /// seen.
    pub fn kinds(&self, end_ns: u64) -> Vec<(IntervalKind, KindTotals)> {
        let mut kinds = self.kinds.clone();
        for ((kind, _), &begin) in &self.open {
            let at = match kinds.iter().position(|(k, _)| k == kind) {
                Some(at) => at,
                None => {
                    kinds.push((kind.clone(), KindTotals::default()));
                    kinds.len() - 1
                }
            };
            add(&mut kinds[at].1, self.start_ns, begin, end_ns);
        }
        kinds.sort_by_key(|(kind, _)| kind.rank());
        kinds
    }

    /// Whether anything but the VM's name was published into it (or carried over).
    pub fn has_statistics(&self) -> bool {
        !(self.config.is_empty()
            && self.counters.is_empty()
            && self.gauges.is_empty()
            && self.kinds.is_empty()
            && self.open.is_empty()
            && self.counts.is_empty()
            && self.events.is_empty())
    }

    /// The window up to `end_ns`, for a profile.
    pub fn summary(&self, pid: u32, end_ns: u64) -> VmStatistics {
        VmStatistics {
            pid,
            vm: self.vm.clone(),
            configuration: self
                .config
                .iter()
                .map(|(name, value, unit)| Configuration {
                    name: name.clone(),
                    value: Some(value.clone()),
                    unit: unit.clone(),
                })
                .collect(),
            counters: self
                .counters
                .iter()
                .filter_map(|l| {
                    let (first, last) = l.ends()?;
                    Some(CounterDelta {
                        name: l.name.clone(),
                        unit: l.unit.clone(),
                        delta: last.saturating_sub(first),
                        last,
                    })
                })
                .collect(),
            gauges: self
                .gauges
                .iter()
                .filter_map(|l| {
                    let (first, last) = l.ends()?;
                    let (low, high) = l.range()?;
                    Some(GaugeDelta {
                        name: l.name.clone(),
                        unit: l.unit.clone(),
                        delta: last.saturating_sub(first),
                        last,
                        low,
                        high,
                    })
                })
                .collect(),
            intervals: self
                .kinds(end_ns)
                .into_iter()
                .map(|(kind, t)| IntervalTotals {
                    kind,
                    count: t.count,
                    total_ns: t.total_ns,
                    longest_ns: t.longest_ns,
                    sampled: 0,
                })
                .collect(),
            window_ns: end_ns.saturating_sub(self.start_ns),
            samples: 0,
            exact_counts: self.counts.summary(),
            domain_events: {
                let seconds = end_ns.saturating_sub(self.start_ns).div_ceil(1_000_000_000);
                let mut types = self.events.summary(seconds as usize);
                if self.events.untyped > 0 {
                    types.push(vmscope_model::DomainEventType {
                        name: "(more types than a window tells apart)".into(),
                        count: self.events.untyped,
                        ..Default::default()
                    });
                }
                types
            },
        }
    }
}

/// The level named `name`, made if new and there is room.
fn level<'a, V>(levels: &'a mut Vec<Level<V>>, name: &str, unit: &str) -> Option<&'a mut Level<V>> {
    let at = match levels.iter().position(|l| l.name == name) {
        Some(at) => at,
        None if levels.len() < MAX_NAMES => {
            levels.push(Level {
                name: name.to_owned(),
                unit: unit.to_owned(),
                baseline: None,
                last: None,
                inside: None,
            });
            levels.len() - 1
        }
        None => return None,
    };
    Some(&mut levels[at])
}

/// Adds an interval [begin, end) to `totals`, clipped to a window starting at `start_ns`.
fn add(totals: &mut KindTotals, start_ns: u64, begin: u64, end: u64) {
    totals.total_ns += end.saturating_sub(begin.max(start_ns));
    if begin >= start_ns {
        totals.longest_ns = totals.longest_ns.max(end.saturating_sub(begin));
    }
}

/// What a process published so far: a window since the beginning of time, which each new
/// session's window takes over ([`Window::carried`]), and its intervals through time, which
/// its samples are tagged with ([`VmState::during`]).
#[derive(Debug, Default)]
pub struct VmState {
    since_ever: Window,
    intervals: IntervalLog,
}

impl VmState {
    /// Takes one event of the VM's.
    pub fn apply(&mut self, ts: u64, event: &StatEvent) {
        self.since_ever.apply(ts, event, None);
        match event {
            StatEvent::Begin { kind, id } => self.intervals.begin(ts, kind, *id),
            StatEvent::End { kind, id } => self.intervals.end(ts, kind, *id),
            _ => {}
        }
    }

    /// The kinds of interval under way at `ts`: to be asked only once every event up to `ts`
    /// was applied.
    pub fn during(&self, ts: u64) -> During<'_> {
        self.intervals.during(ts)
    }

    /// How much of `[begin, end)` each kind of its intervals covers (kinds that cover any).
    pub fn overlaps(&self, begin: u64, end: u64) -> Vec<(IntervalKind, u64)> {
        self.intervals
            .overlaps(begin, end)
            .map(|(kind, ns)| (kind.clone(), ns))
            .collect()
    }

    /// Intervals forgotten before no sample could need them (see [`IntervalLog::forgotten`]).
    pub fn intervals_forgotten(&self) -> u64 {
        self.intervals.forgotten()
    }

    /// Whether the VM published any statistic (beyond its name).
    pub fn has_statistics(&self) -> bool {
        self.since_ever.has_statistics()
    }

    /// A window from `start_ns`, knowing what the VM published before.
    pub fn window(&self, start_ns: u64) -> Window {
        self.since_ever.carried(start_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, value: u64) -> StatEvent {
        StatEvent::Counter {
            name: name.into(),
            unit: String::new(),
            value,
        }
    }

    fn gauge(name: &str, value: i64) -> StatEvent {
        StatEvent::Gauge {
            name: name.into(),
            unit: "bytes".into(),
            value,
        }
    }

    fn begin(kind: IntervalKind, id: u64) -> StatEvent {
        StatEvent::Begin { kind, id }
    }

    fn end(kind: IntervalKind, id: u64) -> StatEvent {
        StatEvent::End { kind, id }
    }

    #[test]
    fn levels_are_measured_from_the_last_reading_before_the_window() {
        let mut w = Window::starting(100);
        w.apply(10, &counter("sends", 5), None);
        w.apply(90, &counter("sends", 40), None);
        w.apply(150, &counter("sends", 100), None);
        w.apply(180, &counter("sends", 130), Some(200));
        // After the window's end: not its.
        w.apply(250, &counter("sends", 900), Some(200));
        w.apply(120, &gauge("old", 1000), None);
        w.apply(190, &gauge("old", 600), None);
        let p = w.summary(7, 200);
        assert_eq!(
            (p.counters[0].delta, p.counters[0].last),
            (90, 130),
            "130 - 40"
        );
        // First published inside the window: measured from its first value.
        assert_eq!((p.gauges[0].delta, p.gauges[0].last), (-400, 600));
        assert_eq!(p.window_ns, 100);
    }

    /// A heap that fills and empties between the window's ends: its range says how high it
    /// went, the level it started at included, and nothing stamped outside the window.
    #[test]
    fn gauges_keep_their_lowest_and_highest_values_in_the_window() {
        let mut w = Window::starting(100);
        w.apply(10, &gauge("young", 9_000), None);
        w.apply(90, &gauge("young", 500), None);
        w.apply(120, &gauge("young", 4_000), None);
        w.apply(130, &gauge("young", 800), None);
        w.apply(150, &gauge("young", 700), Some(200));
        w.apply(250, &gauge("young", 99_999), Some(200));
        let young = &w.summary(7, 200).gauges[0];
        assert_eq!((young.delta, young.last), (200, 700), "700 - 500");
        assert_eq!((young.low, young.high), (500, 4_000));
        // The next window starts at the last level: nothing published yet, its range is that.
        let next = w.carried(200);
        let young = &next.summary(7, 300).gauges[0];
        assert_eq!((young.delta, young.low, young.high), (0, 700, 700));
    }

    #[test]
    fn intervals_are_clipped_to_the_window_and_counted_where_they_begin() {
        let mut w = Window::starting(1_000);
        let scavenge = IntervalKind::Scavenge;
        // Begun before the window: its time inside counts, not itself.
        w.apply(900, &begin(scavenge.clone(), 1), None);
        w.apply(1_100, &end(scavenge.clone(), 1), None);
        w.apply(1_200, &begin(scavenge.clone(), 2), None);
        w.apply(1_500, &end(scavenge.clone(), 2), None);
        // Still open at the end: counted up to it.
        w.apply(1_900, &begin(IntervalKind::FullGc, 0), None);
        let named = IntervalKind::Named("JIT compile".into());
        w.apply(1_950, &begin(named.clone(), 0), None);
        w.apply(1_960, &end(named.clone(), 0), None);
        let kinds = w.kinds(2_000);
        assert_eq!(
            kinds,
            [
                (
                    scavenge,
                    KindTotals {
                        count: 1,
                        total_ns: 100 + 300,
                        longest_ns: 300
                    }
                ),
                (
                    IntervalKind::FullGc,
                    KindTotals {
                        count: 1,
                        total_ns: 100,
                        longest_ns: 100
                    }
                ),
                (
                    named,
                    KindTotals {
                        count: 1,
                        total_ns: 10,
                        longest_ns: 10
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_later_window_takes_over_levels_and_open_intervals() {
        let mut state = VmState::default();
        state.apply(1, &StatEvent::Vm("jitvm 0.1".into()));
        state.apply(10, &counter("sends", 7));
        state.apply(20, &begin(IntervalKind::CodeCompaction, 0));
        let mut w = state.window(50);
        w.apply(60, &end(IntervalKind::CodeCompaction, 0), None);
        w.apply(70, &counter("sends", 10), None);
        let p = w.summary(1, 100);
        assert_eq!(p.vm, "jitvm 0.1");
        assert_eq!(p.counters[0].delta, 3);
        assert_eq!((p.intervals[0].count, p.intervals[0].total_ns), (0, 10));
    }

    fn proto_begin(kind: i32, name: &str, id: u64) -> pb::code_map_event::Event {
        pb::code_map_event::Event::Begin(pb::IntervalBegin {
            kind,
            name: name.into(),
            id,
        })
    }

    fn proto_end(kind: i32, id: u64) -> pb::code_map_event::Event {
        pb::code_map_event::Event::End(pb::IntervalEnd {
            kind,
            name: String::new(),
            id,
        })
    }

    fn proto_counter(name: &str, value: u64) -> pb::code_map_event::Event {
        pb::code_map_event::Event::Counter(pb::CounterValue {
            name: name.into(),
            unit: String::new(),
            value,
        })
    }

    /// A thread counter names a thread and an aligned word; a publication holds at most
    /// [`MAX_THREAD_COUNTERS`] at once, and address 0 gives one back.
    #[test]
    fn thread_counters_are_checked_and_bounded() {
        let counter = |tid, address| {
            pb::code_map_event::Event::ThreadCounter(pb::ThreadCounter { tid, address })
        };
        let mut rules = Rules::default();
        assert_eq!(
            rules.check(&counter(7, 0x7000)).unwrap(),
            StatEvent::ThreadCounter {
                tid: 7,
                address: 0x7000,
                owner: 0
            }
        );
        for bad in [
            counter(0, 0x7000),
            counter(8, 0x7004),
            counter(8, u64::MAX - 7),
        ] {
            assert_eq!(rules.check(&bad).unwrap_err().0, Broken::Invalid);
        }
        for tid in 8..7 + MAX_THREAD_COUNTERS as u32 {
            rules.check(&counter(tid, 0x8000)).unwrap();
        }
        let one_more = 7 + MAX_THREAD_COUNTERS as u32;
        assert_eq!(
            rules.check(&counter(one_more, 0x8000)).unwrap_err().0,
            Broken::TooMany
        );
        // Moved, given back: room again.
        rules.check(&counter(7, 0x9000)).unwrap();
        rules.check(&counter(7, 0)).unwrap();
        rules.check(&counter(one_more, 0x8000)).unwrap();
    }

    /// A label set is bounded and means one set for the process's life: its labels come out
    /// in key order, an id republished with the same labels is taken, with others refused;
    /// past the bounds, refused with the reason.
    #[test]
    fn label_sets_are_checked_and_bounded() {
        use pb::code_map_event::Event;
        let set = |id, labels: &[(&str, &str)]| {
            Event::LabelSet(pb::LabelSet {
                id,
                labels: labels
                    .iter()
                    .map(|&(key, value)| pb::Label {
                        key: key.into(),
                        value: value.into(),
                    })
                    .collect(),
            })
        };
        let mut rules = Rules::default();
        let StatEvent::LabelSet { id, labels } = rules
            .check(&set(5, &[("tenant", "acme"), ("phase", "parse")]))
            .unwrap()
        else {
            panic!("a label set");
        };
        assert_eq!(id, 5);
        assert_eq!(
            &labels[..],
            [Label::new("phase", "parse"), Label::new("tenant", "acme")]
        );
        rules
            .check(&set(5, &[("phase", "parse"), ("tenant", "acme")]))
            .expect("the same set again");
        let long_key = "k".repeat(MAX_LABEL_KEY_BYTES + 1);
        let long_value = "v".repeat(MAX_LABEL_VALUE_BYTES + 1);
        let many: Vec<(String, String)> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), "v".to_owned()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for bad in [
            set(5, &[("phase", "print")]),
            set(0, &[("phase", "a")]),
            set(6, &[("phase", "a"), ("phase", "b")]),
            set(6, &[("phase", "")]),
            set(6, &[("", "a")]),
            set(6, &[(&long_key, "a")]),
            set(6, &[("phase", &long_value)]),
            set(6, &many),
        ] {
            assert_eq!(rules.check(&bad).unwrap_err().0, Broken::Invalid, "{bad:?}");
        }
        for id in 6..5 + MAX_LABEL_SETS as u64 {
            rules.check(&set(id, &[("n", "1")])).unwrap();
        }
        let past = rules.check(&set(u64::MAX, &[("n", "1")])).unwrap_err();
        assert_eq!(past.0, Broken::TooMany, "{past:?}");
        // Thread label words follow the counters' rules.
        let word = |tid, address| Event::ThreadLabels(pb::ThreadLabels { tid, address });
        rules.check(&word(7, 0x7000)).unwrap();
        assert_eq!(
            rules.check(&word(7, 0x7001)).unwrap_err().0,
            Broken::Invalid
        );
        assert_eq!(
            rules.check(&word(0, 0x7000)).unwrap_err().0,
            Broken::Invalid
        );
    }

    /// Domain events: a type of 1 to 128 bytes, at most 64 frames of 256 bytes.
    #[test]
    fn domain_events_are_checked() {
        let event = |kind: &str, frames: Vec<String>| {
            pb::code_map_event::Event::DomainEvent(pb::DomainEvent {
                r#type: kind.into(),
                object: 3,
                tid: 1,
                frames,
            })
        };
        let mut rules = Rules::default();
        assert!(matches!(
            rules.check(&event("refresh", vec!["a".into()])).unwrap(),
            StatEvent::Domain(e) if e.kind == "refresh" && e.object == 3
        ));
        for bad in [
            event("", vec![]),
            event(&"t".repeat(MAX_EVENT_TYPE_BYTES + 1), vec![]),
            event("t", vec!["f".into(); MAX_EVENT_FRAMES + 1]),
            event("t", vec!["f".repeat(MAX_EVENT_FRAME_BYTES + 1)]),
        ] {
            assert_eq!(rules.check(&bad).unwrap_err().0, Broken::Invalid);
        }
    }

    #[test]
    fn counter_regions_are_checked_before_the_daemon_reads_them() {
        use pb::code_map_event::Event;
        let region = |id, stride, names: usize, address| {
            Event::CounterRegion(pb::CounterRegion {
                id,
                kind: pb::CounterKind::Activations as i32,
                address,
                stride,
                names: (0..names).map(|i| format!("m{i}")).collect(),
            })
        };
        let values = |region, n: usize| {
            Event::CounterValues(pb::CounterRegionValues {
                region,
                values: vec![1; n],
            })
        };
        let mut rules = Rules::default();
        let broken = |rules: &mut Rules, e| rules.check(&e).unwrap_err().0;
        assert_eq!(broken(&mut rules, values(1, 2)), Broken::Unmatched);
        assert!(matches!(
            rules.check(&region(1, 8, 2, 0x1000)).unwrap(),
            StatEvent::Region(r) if r.span() == 16
        ));
        assert_eq!(broken(&mut rules, region(1, 8, 2, 0x1000)), Broken::Invalid);
        assert_eq!(broken(&mut rules, values(1, 3)), Broken::Invalid);
        rules.check(&values(1, 2)).unwrap();
        for bad in [
            region(2, 4, 2, 0x1000),
            region(2, 12, 2, 0x1000),
            region(2, 8, 0, 0x1000),
            region(2, 8, MAX_COUNTERS + 1, 0x1000),
            region(2, 8, 2, 0),
            region(2, 64, 2, u64::MAX - 8),
        ] {
            assert_eq!(broken(&mut rules, bad), Broken::Invalid);
        }
        let mut unknown = region(2, 8, 1, 0x1000);
        if let Event::CounterRegion(r) = &mut unknown {
            r.kind = 99;
        }
        assert_eq!(broken(&mut rules, unknown), Broken::UnknownKind);
        for id in 2..=MAX_REGIONS as u32 {
            rules.check(&region(id, 8, 1, 0x1000)).unwrap();
        }
        assert_eq!(
            broken(&mut rules, region(99, 8, 1, 0x1000)),
            Broken::TooMany
        );
    }

    #[test]
    fn rule_breakers_are_refused_with_their_reason() {
        let mut rules = Rules::default();
        let broken = |rules: &mut Rules, e| rules.check(&e).unwrap_err().0;
        let gc = PbKind::Scavenge as i32;
        assert_eq!(
            broken(&mut rules, proto_begin(99, "", 0)),
            Broken::UnknownKind
        );
        assert_eq!(broken(&mut rules, proto_begin(0, "", 0)), Broken::Invalid);
        assert_eq!(
            broken(&mut rules, proto_begin(PbKind::Named as i32, "", 0)),
            Broken::Invalid
        );
        // A kind of the VM's own may not take the key of one of the protocol's.
        assert_eq!(
            broken(&mut rules, proto_begin(PbKind::Named as i32, "scavenge", 0)),
            Broken::Invalid
        );
        assert_eq!(broken(&mut rules, proto_end(gc, 1)), Broken::Unmatched);
        rules.check(&proto_begin(gc, "", 1)).unwrap();
        assert_eq!(
            broken(&mut rules, proto_begin(gc, "", 1)),
            Broken::Unmatched
        );
        rules.check(&proto_end(gc, 1)).unwrap();
        assert_eq!(broken(&mut rules, proto_end(gc, 1)), Broken::Unmatched);
        rules.check(&proto_counter("sends", 10)).unwrap();
        assert_eq!(
            broken(&mut rules, proto_counter("sends", 9)),
            Broken::Invalid,
            "a counter going down"
        );
        assert_eq!(broken(&mut rules, proto_counter("", 1)), Broken::Invalid);
        for n in 1..MAX_NAMES {
            rules.check(&proto_counter(&format!("c{n}"), 0)).unwrap();
        }
        assert_eq!(
            broken(&mut rules, proto_counter("one too many", 0)),
            Broken::TooMany
        );
        // Names already in use go on.
        rules.check(&proto_counter("sends", 11)).unwrap();
        for n in 0..MAX_NAMED_KINDS {
            let name = format!("kind {n}");
            rules
                .check(&proto_begin(PbKind::Named as i32, &name, 0))
                .unwrap();
        }
        assert_eq!(
            broken(&mut rules, proto_begin(PbKind::Named as i32, "one more", 0)),
            Broken::TooMany
        );
        for id in 0..MAX_OPEN_INTERVALS as u64 - MAX_NAMED_KINDS as u64 {
            rules.check(&proto_begin(gc, "", 100 + id)).unwrap();
        }
        assert_eq!(broken(&mut rules, proto_begin(gc, "", 7)), Broken::TooMany);
    }
}
