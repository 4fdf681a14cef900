//! Who the processes of a profile are, for formats that label samples with them, and each
//! one's share of the samples.

use std::collections::HashMap;

use serde::Serialize;

use vmscope_model as model;

use crate::model::percent;

/// One process's samples in the profile: a system-wide profile splits a process's samples
/// over its sections, and only this says how much of the whole is that process's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessTotal {
    /// Process id.
    pub pid: u32,
    /// Its name (comm), empty when the profile does not say.
    pub command: String,
    /// Its samples.
    pub samples: u64,
    /// Their share of every sample, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_total: f64,
}

/// Every process with samples, most samples first (then by pid), from the profile's stacks,
/// which hold every sample once.
pub(crate) fn process_totals(profile: &model::Profile) -> Vec<ProcessTotal> {
    let mut samples: HashMap<u32, u64> = HashMap::new();
    for stack in &profile.stacks {
        let count = samples.entry(stack.pid).or_insert(0);
        *count = count.saturating_add(stack.samples());
    }
    let names = process_names(profile);
    let mut totals: Vec<ProcessTotal> = samples
        .into_iter()
        .filter(|&(_, samples)| samples > 0)
        .map(|(pid, samples)| ProcessTotal {
            pid,
            command: names.get(&pid).copied().unwrap_or_default().to_owned(),
            samples,
            percent_of_total: percent(samples, profile.total_samples),
        })
        .collect();
    crate::rank::rank(&mut totals, |t| t.samples, |a, b| a.pid.cmp(&b.pid));
    totals
}

/// Process names by pid: the session's targets as they were at start, then the rows'
/// processes, which win: they name a process as the session first sampled it, or after its
/// latest exec, so they describe the samples.
pub(crate) fn process_names(profile: &model::Profile) -> HashMap<u32, &str> {
    let targets = profile
        .session
        .iter()
        .flat_map(|s| &s.targets)
        .map(|t| (t.pid, t.command.as_str()));
    let rows = profile
        .rows
        .iter()
        .flat_map(|row| &row.processes)
        .map(|p| (p.pid, p.command.as_str()));
    targets
        .chain(rows)
        .filter(|(_, command)| !command.is_empty())
        .collect()
}
