//! Turning a session [`Snapshot`] into the API's [`Profile`]: symbolise each distinct location
//! once, then aggregate rows by (section, module, name) and problems by (module, reason).
//!
//! Rows are sent unfolded and sorted, most samples first; folding small rows into
//! `...others...` and percentages are the report's business (the CLI), so that every client
//! gets every number.

use std::collections::HashMap;

use vmscope_proto::v1::{Profile, ProfileRow, Section, SymbolizationIssue};

use crate::{session::Snapshot, symbolize::Symbolizer};

/// Builds the profile of a snapshot. Runs on a blocking thread: the first profile of a session
/// may parse binaries.
pub fn build_profile(snapshot: Snapshot, symbolizer: &Symbolizer) -> Profile {
    let mut rows: HashMap<(Section, String, String), (u64, bool)> = HashMap::new();
    let mut issues: HashMap<(String, String), u64> = HashMap::new();
    for (location, samples) in &snapshot.counts {
        let resolved = symbolizer.resolve(location);
        let row = rows
            .entry((resolved.section, resolved.module.clone(), resolved.name))
            .or_insert((0, resolved.symbolized));
        row.0 += samples;
        if let Some(reason) = resolved.issue {
            *issues.entry((resolved.module, reason)).or_insert(0) += samples;
        }
    }

    let mut rows: Vec<ProfileRow> = rows
        .into_iter()
        .map(
            |((section, module, name), (samples, symbolized))| ProfileRow {
                section: section as i32,
                name,
                module,
                samples,
                symbolized,
            },
        )
        .collect();
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.section.cmp(&b.section))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
    let mut issues: Vec<SymbolizationIssue> = issues
        .into_iter()
        .map(|((module, reason), samples)| SymbolizationIssue {
            module,
            reason,
            samples,
        })
        .collect();
    issues.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.module.cmp(&b.module))
            .then_with(|| a.reason.cmp(&b.reason))
    });

    let duration_seconds = snapshot.duration.as_secs_f64();
    let measured_frequency_hz = if snapshot.cpu_seconds > 0.0 {
        snapshot.total_samples as f64 / snapshot.cpu_seconds
    } else {
        0.0
    };
    Profile {
        session: Some(snapshot.session),
        vm_executable: snapshot.vm_executable,
        total_samples: snapshot.total_samples,
        lost_samples: snapshot.lost_per_cpu.iter().sum(),
        lost_samples_per_cpu: snapshot.lost_per_cpu,
        duration_seconds,
        cpu_seconds: snapshot.cpu_seconds,
        measured_frequency_hz,
        rows,
        symbolization_issues: issues,
        has_generated_code: snapshot.has_generated_code,
        complete: snapshot.complete,
    }
}
