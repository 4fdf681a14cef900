//! Turning a session [`Snapshot`] into the API's [`Profile`]: symbolise each distinct location
//! once, then aggregate rows by (section, module, name), each with its samples per process,
//! and problems by (module, reason).
//!
//! Rows are sent unfolded and sorted, most samples first; folding small rows into
//! `...others...` and percentages are the report's business (the CLI), so that every client
//! gets every number.

use std::collections::{BTreeMap, HashMap};

use vmscope_proto::v1::{
    AttributedSample, CodeKind, CodeRange, InlinedMethod, ProcessSamples, Profile, ProfileRow,
    Section, SymbolizationIssue,
};

use crate::{
    session::Snapshot,
    symbolize::{KERNEL_MODULE, Location, Resolved, Symbolizer},
};

/// What a profile may show its reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Name kernel functions. When false, kernel samples are one `[kernel]` row, with this
    /// reason.
    pub hide_kernel: Option<String>,
}

/// What one row accumulates.
#[derive(Debug, Default)]
struct RowSum {
    samples: u64,
    symbolized: bool,
    kind: CodeKind,
    code_map: String,
    /// Samples per range, in code order (range index, then label).
    ranges: BTreeMap<(usize, String), u64>,
    /// Samples per inlined method (optimised code).
    inlined: HashMap<String, u64>,
    /// Samples per process.
    processes: HashMap<u32, u64>,
}

/// Builds the profile of a snapshot. Runs on a blocking thread: the first profile of a session
/// may parse binaries.
pub fn build_profile(
    snapshot: Snapshot,
    symbolizer: &Symbolizer,
    options: &ProfileOptions,
) -> Profile {
    let mut resolved: HashMap<Location, Resolved> = HashMap::new();
    let mut resolve = |location: &Location| -> Resolved {
        resolved
            .entry(*location)
            .or_insert_with(|| match (location, &options.hide_kernel) {
                (Location::Kernel { .. }, Some(reason)) => Resolved {
                    section: Section::Other,
                    module: KERNEL_MODULE.to_owned(),
                    name: "[kernel]".to_owned(),
                    symbolized: false,
                    issue: Some(reason.clone()),
                },
                _ => symbolizer.resolve(location),
            })
            .clone()
    };

    let mut rows: HashMap<(Section, String, String, bool), RowSum> = HashMap::new();
    let mut issues: HashMap<(String, String), u64> = HashMap::new();
    for &(pid, location, samples) in &snapshot.counts {
        let resolved = resolve(&location);
        let code = match location {
            Location::Jit { code, offset } => symbolizer.codes().get(code).map(|c| (c, offset)),
            _ => None,
        };
        let optimised = code.as_ref().is_some_and(|(c, _)| c.is_optimised());
        let row = rows
            .entry((
                resolved.section,
                resolved.module.clone(),
                resolved.name,
                optimised,
            ))
            .or_default();
        row.samples += samples;
        *row.processes.entry(pid).or_insert(0) += samples;
        row.symbolized = resolved.symbolized;
        if let Some((code, offset)) = code {
            row.kind = code.kind;
            row.code_map = code.source.label().to_owned();
            if let Some((index, label)) = code.range_label(offset) {
                *row.ranges.entry((index, label)).or_insert(0) += samples;
            }
            if code.is_optimised() {
                *row.inlined
                    .entry(code.attributed_method(offset).to_owned())
                    .or_insert(0) += samples;
            }
        }
        if let Some(reason) = resolved.issue {
            *issues.entry((resolved.module, reason)).or_insert(0) += samples;
        }
    }

    let mut rows: Vec<ProfileRow> = rows
        .into_iter()
        .map(|((section, module, name, optimised), sum)| {
            let mut inlined: Vec<InlinedMethod> = sum
                .inlined
                .into_iter()
                .map(|(name, samples)| InlinedMethod { name, samples })
                .collect();
            inlined.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
            let mut processes: Vec<ProcessSamples> = sum
                .processes
                .into_iter()
                .map(|(pid, samples)| ProcessSamples {
                    pid,
                    command: snapshot.commands.get(&pid).cloned().unwrap_or_default(),
                    samples,
                })
                .collect();
            processes.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.pid.cmp(&b.pid)));
            ProfileRow {
                section: section as i32,
                name,
                module,
                samples: sum.samples,
                symbolized: sum.symbolized,
                kind: sum.kind as i32,
                ranges: sum
                    .ranges
                    .into_iter()
                    .map(|((_, label), samples)| CodeRange { label, samples })
                    .collect(),
                inlined,
                code_map: sum.code_map,
                optimised,
                processes,
                inclusive_samples: sum.samples,
            }
        })
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
    let samples = snapshot
        .kept
        .iter()
        .map(|kept| {
            let resolved = resolve(&kept.location);
            AttributedSample {
                timestamp_ns: kept.timestamp_ns,
                pid: kept.pid,
                tid: kept.tid,
                ip: kept.ip,
                kernel: kept.kernel,
                section: resolved.section as i32,
                name: resolved.name,
                module: resolved.module,
                code_start: kept.code_start,
                ..AttributedSample::default()
            }
        })
        .collect();

    let processes = snapshot
        .counts
        .iter()
        .map(|&(pid, _, _)| pid)
        .collect::<std::collections::HashSet<_>>()
        .len() as u32;
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
        samples,
        samples_not_kept: snapshot.not_kept,
        host_steal_percent: snapshot.host_steal_percent,
        incomplete_reason: snapshot.incomplete_reason.unwrap_or_default(),
        jit_samples_before_code_map: snapshot.jit_not_waited,
        processes,
        ..Profile::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vmscope_proto::v1 as pb;

    use super::*;
    use crate::symbolize::{UnmappedReason, tests::symbolizer};

    /// A snapshot of `counts` in process 7 (named "vm").
    fn snapshot(counts: Vec<(Location, u64)>) -> Snapshot {
        Snapshot {
            session: pb::Session::default(),
            total_samples: counts.iter().map(|(_, n)| n).sum(),
            counts: counts.into_iter().map(|(l, n)| (7, l, n)).collect(),
            commands: [(7, "vm".to_owned())].into_iter().collect(),
            lost_per_cpu: vec![1, 0, 2],
            duration: Duration::from_secs(2),
            cpu_seconds: 2.5,
            host_steal_percent: 4.5,
            vm_executable: "/usr/bin/vm".into(),
            has_generated_code: false,
            complete: true,
            incomplete_reason: None,
            jit_not_waited: 0,
            kept: Vec::new(),
            not_kept: 0,
        }
    }

    #[test]
    fn rows_and_issues_are_aggregated_and_ordered() {
        let kernel = |ip| Location::Kernel { ip };
        let counts = vec![
            (kernel(0xffff_ffff_8100_0101), 30),
            (kernel(0xffff_ffff_8100_0180), 20), // same function: one row of 50
            (kernel(0xffff_ffff_8100_0010), 7),
            (Location::Unmapped(UnmappedReason::ProcessGone), 5),
            (Location::Unmapped(UnmappedReason::NoMapping), 3),
        ];
        let profile = build_profile(
            snapshot(counts),
            &symbolizer(),
            &ProfileOptions { hide_kernel: None },
        );
        let rows: Vec<(&str, u64)> = profile
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples))
            .collect();
        assert_eq!(rows, [("do_work", 50), ("[unknown]", 8), ("_stext", 7)]);
        assert_eq!(profile.total_samples, 65);
        assert_eq!(profile.lost_samples, 3);
        assert!((profile.measured_frequency_hz - 26.0).abs() < 1e-9);
        assert_eq!(profile.host_steal_percent, 4.5);
        let issues: Vec<(&str, u64)> = profile
            .symbolization_issues
            .iter()
            .map(|i| (i.reason.as_str(), i.samples))
            .collect();
        assert_eq!(
            issues,
            [
                (UnmappedReason::ProcessGone.describe(), 5),
                (UnmappedReason::NoMapping.describe(), 3)
            ]
        );
    }

    /// A method's baseline and optimised versions: separate rows, each with its own ranges in
    /// code order, the optimised one with its time per inlined method (its own code included).
    #[test]
    fn jit_versions_get_rows_of_their_own() {
        use crate::codemap::code::{Code, CodeSource, PcPoint};
        use vmscope_proto::v1::CodeKind;
        let symbolizer = symbolizer();
        let method = |pcs: &[(u64, u32, &str)]| Code {
            pc_map: pcs
                .iter()
                .map(|&(offset, bcpc, inlined)| PcPoint {
                    offset,
                    bcpc,
                    inlined: if inlined.is_empty() {
                        Vec::new()
                    } else {
                        vec![(inlined.to_owned(), 0)]
                    },
                })
                .collect(),
            ..Code::named(CodeKind::Method, "Foo>>bar", CodeSource::Vm("vm".into()))
        };
        let codes = symbolizer.codes();
        let baseline = codes
            .intern(method(&[(0x10, 0, ""), (0x20, 4, "")]))
            .unwrap();
        let optimised = codes
            .intern(method(&[(0x10, 0, ""), (0x20, 4, "Foo>>inlined")]))
            .unwrap();
        let jit = |code, offset| Location::Jit { code, offset };
        let counts = vec![
            (jit(baseline, 0x5), 10), // before the first pc: "1->1"
            (jit(baseline, 0x18), 20),
            (jit(optimised, 0x18), 7), // the method's own code
            (jit(optimised, 0x28), 3), // inlined
        ];
        let profile = build_profile(
            snapshot(counts),
            &symbolizer,
            &ProfileOptions { hide_kernel: None },
        );
        let rows: Vec<(&str, u64, bool)> = profile
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples, r.optimised))
            .collect();
        assert_eq!(rows, [("Foo>>bar", 30, false), ("Foo>>bar", 10, true)]);
        let base = &profile.rows[0];
        assert_eq!(base.kind(), CodeKind::Method);
        assert_eq!(base.code_map, "vm");
        let ranges: Vec<u64> = base.ranges.iter().map(|r| r.samples).collect();
        assert_eq!(ranges, [10, 20], "in code order: {:?}", base.ranges);
        assert!(base.inlined.is_empty());
        let inlined: Vec<(&str, u64)> = profile.rows[1]
            .inlined
            .iter()
            .map(|m| (m.name.as_str(), m.samples))
            .collect();
        assert_eq!(inlined, [("Foo>>bar", 7), ("Foo>>inlined", 3)]);
    }

    #[test]
    fn rows_carry_their_samples_per_process() {
        let kernel = Location::Kernel {
            ip: 0xffff_ffff_8100_0101,
        };
        let mut snap = snapshot(Vec::new());
        snap.counts = vec![(10, kernel, 3), (11, kernel, 5), (10, kernel, 1)];
        snap.total_samples = 9;
        snap.commands = [(10, "vmscoped".to_owned()), (11, "vmscoped".to_owned())]
            .into_iter()
            .collect();
        let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
        assert_eq!(profile.processes, 2);
        assert_eq!(profile.rows.len(), 1);
        let by_process: Vec<(u32, &str, u64)> = profile.rows[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.command.as_str(), p.samples))
            .collect();
        assert_eq!(by_process, [(11, "vmscoped", 5), (10, "vmscoped", 4)]);
    }

    #[test]
    fn kernel_functions_can_be_hidden_but_stay_counted() {
        let counts = vec![
            (
                Location::Kernel {
                    ip: 0xffff_ffff_8100_0101,
                },
                30,
            ),
            (
                Location::Kernel {
                    ip: 0xffff_ffff_8100_0010,
                },
                7,
            ),
        ];
        let reason = "kernel functions are shown to root only".to_owned();
        let profile = build_profile(
            snapshot(counts),
            &symbolizer(),
            &ProfileOptions {
                hide_kernel: Some(reason.clone()),
            },
        );
        assert_eq!(profile.rows.len(), 1);
        assert_eq!(profile.rows[0].name, "[kernel]");
        assert_eq!(profile.rows[0].samples, 37);
        assert_eq!(profile.symbolization_issues[0].reason, reason);
    }
}
