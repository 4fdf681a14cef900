//! What a VM published of itself (settings, memory, GCs, compactions, exact counts, domain
//! events), between the model and the API.

use vmscope_model as m;

use super::{interval_kind, model_interval_kind};
use crate::v1;

impl From<m::VmStatistics> for v1::VmStatistics {
    fn from(s: m::VmStatistics) -> Self {
        v1::VmStatistics {
            pid: s.pid,
            vm: s.vm,
            configuration: s
                .configuration
                .into_iter()
                .map(|c| v1::Configuration {
                    name: c.name,
                    value: c.value.map(|value| match value {
                        m::ConfigValue::Number(n) => v1::configuration::Value::Number(n),
                        m::ConfigValue::Text(t) => v1::configuration::Value::Text(t),
                    }),
                    unit: c.unit,
                })
                .collect(),
            counters: s
                .counters
                .into_iter()
                .map(|c| v1::CounterDelta {
                    name: c.name,
                    unit: c.unit,
                    delta: c.delta,
                    last: c.last,
                })
                .collect(),
            gauges: s
                .gauges
                .into_iter()
                .map(|g| v1::GaugeDelta {
                    name: g.name,
                    unit: g.unit,
                    delta: g.delta,
                    last: g.last,
                    low: g.low,
                    high: g.high,
                })
                .collect(),
            intervals: s
                .intervals
                .into_iter()
                .map(|t| {
                    let (kind, name) = interval_kind(&t.kind);
                    v1::IntervalTotals {
                        kind: kind as i32,
                        name,
                        count: t.count,
                        total_ns: t.total_ns,
                        longest_ns: t.longest_ns,
                        sampled: t.sampled,
                    }
                })
                .collect(),
            window_ns: s.window_ns,
            samples: s.samples,
            exact_counts: s
                .exact_counts
                .into_iter()
                .map(|c| v1::ExactCounts {
                    kind: c.kind,
                    counts: c
                        .counts
                        .into_iter()
                        .map(|n| v1::NamedCount {
                            name: n.name,
                            count: n.count,
                        })
                        .collect(),
                    start_source: c.start_source,
                    end_source: c.end_source,
                    note: c.note,
                })
                .collect(),
            domain_events: s
                .domain_events
                .into_iter()
                .map(|t| v1::DomainEventType {
                    name: t.name,
                    count: t.count,
                    per_second: t.per_second,
                    objects: t
                        .objects
                        .into_iter()
                        .map(|o| v1::ObjectEvents {
                            object: o.object,
                            count: o.count,
                        })
                        .collect(),
                    objects_untold: t.objects_untold,
                    stacks: t
                        .stacks
                        .into_iter()
                        .map(|e| v1::EventStack {
                            frames: e.frames,
                            count: e.count,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

impl From<v1::VmStatistics> for m::VmStatistics {
    fn from(s: v1::VmStatistics) -> Self {
        m::VmStatistics {
            pid: s.pid,
            vm: s.vm,
            configuration: s
                .configuration
                .into_iter()
                .map(|c| m::Configuration {
                    name: c.name,
                    value: c.value.map(|value| match value {
                        v1::configuration::Value::Number(n) => m::ConfigValue::Number(n),
                        v1::configuration::Value::Text(t) => m::ConfigValue::Text(t),
                    }),
                    unit: c.unit,
                })
                .collect(),
            counters: s
                .counters
                .into_iter()
                .map(|c| m::CounterDelta {
                    name: c.name,
                    unit: c.unit,
                    delta: c.delta,
                    last: c.last,
                })
                .collect(),
            gauges: s
                .gauges
                .into_iter()
                .map(|g| m::GaugeDelta {
                    name: g.name,
                    unit: g.unit,
                    delta: g.delta,
                    last: g.last,
                    low: g.low,
                    high: g.high,
                })
                .collect(),
            intervals: s
                .intervals
                .into_iter()
                .map(|t| m::IntervalTotals {
                    kind: model_interval_kind(t.kind, t.name),
                    count: t.count,
                    total_ns: t.total_ns,
                    longest_ns: t.longest_ns,
                    sampled: t.sampled,
                })
                .collect(),
            window_ns: s.window_ns,
            samples: s.samples,
            exact_counts: s
                .exact_counts
                .into_iter()
                .map(|c| m::ExactCounts {
                    kind: c.kind,
                    counts: c
                        .counts
                        .into_iter()
                        .map(|n| m::NamedCount {
                            name: n.name,
                            count: n.count,
                        })
                        .collect(),
                    start_source: c.start_source,
                    end_source: c.end_source,
                    note: c.note,
                })
                .collect(),
            domain_events: s
                .domain_events
                .into_iter()
                .map(|t| m::DomainEventType {
                    name: t.name,
                    count: t.count,
                    per_second: t.per_second,
                    objects: t
                        .objects
                        .into_iter()
                        .map(|o| m::ObjectEvents {
                            object: o.object,
                            count: o.count,
                        })
                        .collect(),
                    objects_untold: t.objects_untold,
                    stacks: t
                        .stacks
                        .into_iter()
                        .map(|e| m::EventStack {
                            frames: e.frames,
                            count: e.count,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}
