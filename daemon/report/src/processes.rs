//! Who the processes of a profile are, for formats that label samples with them.

use std::collections::HashMap;

use vmscope_proto::v1 as pb;

/// Process names by pid: the session's targets as they were at start, then the rows'
/// processes, which win: they name a process as the session first sampled it, or after its
/// latest exec, so they describe the samples.
pub(crate) fn process_names(profile: &pb::Profile) -> HashMap<u32, &str> {
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
