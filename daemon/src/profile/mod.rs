//! Turning a session [`Snapshot`] into the profile model's [`Profile`], which the server carries
//! as the API's: symbolise each distinct location once, expand it into the frames a stack shows
//! (a JIT frame of optimised code into its inlined methods, a native frame into the functions
//! inlined at its address, with their source lines, from DWARF), then aggregate:
//!
//! - rows by (section, module, name), from each stack's leaf (self time), each with its samples
//!   per process, its ranges and inlined methods, its samples per source line of the leaf, and
//!   its inclusive samples (stacks holding it anywhere, once per stack);
//! - stacks of frames per thread, with their samples and the CPU time they stand for;
//! - the threads sampled, with their names;
//! - problems by (module, reason).
//!
//! Rows are sent unfolded and sorted, most samples first; folding small rows into
//! `...others...` and percentages are the report's business (vmscope-report), so that every
//! client gets every number.

mod kernel;
mod placed;
mod rows;
mod stacks;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use std::collections::BTreeMap;

use vmscope_model::{BlockState, OffCpu, Profile, SampleType, StateTime, profile::taken_rate};

use self::{
    kernel::kernel_events,
    placed::place_locations,
    rows::{issues, profile_rows, sum_rows},
    stacks::{interval_kinds, kept_samples, profile_labels, profile_stacks, threads},
};
use crate::{
    cancel::Cancel,
    session::{OffCpuTally, Snapshot, StackSnapshot},
    symbolize::Symbolizer,
};

/// What a profile may show its reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Name kernel functions. When false, kernel samples are one `[kernel]` row, with this
    /// reason.
    pub hide_kernel: Option<String>,
}

/// Builds the profile of a snapshot. Runs on a blocking thread: the first profile of a session
/// may parse binaries.
pub fn build_profile(
    snapshot: Snapshot,
    symbolizer: &Symbolizer,
    options: &ProfileOptions,
) -> Profile {
    build_profile_unless(snapshot, symbolizer, options, &Cancel::never()).expect("never cancelled")
}

/// Locations or stacks handled between two looks at the cancellation flag.
const CANCEL_CHECK_EVERY: usize = 1024;

/// [`build_profile`], given up (`None`) soon after `cancel` is set: nobody waits for it.
pub fn build_profile_unless(
    snapshot: Snapshot,
    symbolizer: &Symbolizer,
    options: &ProfileOptions,
    cancel: &Cancel,
) -> Option<Profile> {
    let cancelled = |i: usize| i.is_multiple_of(CANCEL_CHECK_EVERY) && cancel.is_set();
    let stacks = &snapshot.stacks;
    let mode = snapshot.session.mode;
    let mut placement = place_locations(stacks, symbolizer, options, cancelled)?;
    let samples = stacks.counts.iter().copied();
    let (row_sums, issue_samples) = sum_rows(stacks, &placement, samples, false, cancelled)?;
    let (vm_interval_kinds, during) = interval_kinds(stacks, snapshot.off_cpu.as_ref());
    let (labels, label_sets) = profile_labels(stacks);
    let hidden_kernel = options.hide_kernel.is_some();
    let (stack_nodes, frame_stacks, stack_ends) = profile_stacks(
        stacks,
        &placement.placed,
        hidden_kernel,
        (&during, &label_sets),
        mode,
        snapshot.period_ns,
        cancelled,
    )?;
    let threads = threads(
        stacks,
        &snapshot.thread_names,
        snapshot.period_ns,
        snapshot.off_cpu.as_ref(),
        &vm_interval_kinds,
    );
    let names = (&snapshot.commands, &snapshot.thread_names);
    let rows = profile_rows(row_sums, &placement, names, &label_sets);
    let off_cpu = match &snapshot.off_cpu {
        Some(tally) => {
            let blocks = stacks
                .blocks
                .iter()
                .map(|&(task, stack, _, b)| (task, stack, b.ns));
            let (sums, _) = sum_rows(stacks, &placement, blocks, true, cancelled)?;
            let rows = profile_rows(sums, &placement, names, &label_sets);
            Some(off_cpu(tally, stacks, rows))
        }
        None => None,
    };
    let issues = issues(&placement.placed, issue_samples);
    let samples = kept_samples(&snapshot, &placement.placed, &during);
    let mut sample_types = SampleType::of_mode(mode).to_vec();
    if !stacks.sends.is_empty() {
        sample_types.push(SampleType::Sends);
    }
    let frames = std::mem::take(&mut placement.frames);
    let processes = threads.iter().map(|t| t.pid).collect::<HashSet<_>>().len() as u32;
    let duration_seconds = snapshot.duration.as_secs_f64();
    let measured_frequency_hz = if snapshot.cpu_seconds > 0.0 {
        snapshot.total_samples as f64 / snapshot.cpu_seconds
    } else {
        0.0
    };
    let lost_samples = snapshot.lost_per_cpu.iter().sum();
    let (taken_frequency_hz, throttled) = taken_rate(
        snapshot.total_samples + lost_samples,
        snapshot.cpu_seconds,
        snapshot.session.frequency_hz,
    );
    Some(Profile {
        session: Some(snapshot.session.to_model()),
        vm_executable: snapshot.vm_executable,
        total_samples: snapshot.total_samples,
        lost_samples,
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
        kernel_events: snapshot.kernel_events.map(kernel_events),
        vm_statistics: snapshot.vm_statistics,
        vm_interval_kinds,
        jit_samples_before_code_map: snapshot.jit.provisional,
        jit_samples_awaiting_code_map: snapshot.jit.awaiting,
        jit_samples_caught_up: snapshot.jit.caught_up,
        jit_samples_from_later_snapshot: snapshot.jit.later_snapshot,
        processes,
        frames: frames.frames,
        stack_nodes,
        sample_types,
        stacks: frame_stacks,
        threads,
        truncated_stacks: snapshot.truncated,
        stack_ends,
        taken_frequency_hz,
        throttled,
        off_cpu,
        thread_filter: snapshot.thread_filter.unwrap_or_default(),
        labels,
        label_filter: snapshot.label_filter.unwrap_or_default(),
        call_counts: snapshot.call_counts,
    })
}

/// What a profile says of its time off the CPU: its tally, its rows of blocks (`rows`), and
/// its time by why threads were off the CPU, from the blocks in `stacks`.
fn off_cpu(
    tally: &OffCpuTally,
    stacks: &StackSnapshot,
    rows: Vec<vmscope_model::ProfileRow>,
) -> OffCpu {
    let mut by_state: BTreeMap<BlockState, StateTime> = BTreeMap::new();
    for &(_, _, state, b) in &stacks.blocks {
        let sum = by_state.entry(state).or_insert(StateTime {
            state,
            ..StateTime::default()
        });
        sum.blocks += b.count;
        sum.ns = sum.ns.saturating_add(b.ns);
    }
    let mut states: Vec<StateTime> = by_state.into_values().collect();
    states.sort_by(StateTime::order);
    let short = tally.short_blocks();
    OffCpu {
        blocks: tally.blocks,
        total_ns: tally.ns,
        rows,
        states,
        short_blocks: short.count,
        short_ns: short.ns,
        lost_blocks: tally.lost.1.saturating_sub(tally.lost.0),
        unfollowed: tally.unfollowed.1.saturating_sub(tally.unfollowed.0),
        still_blocked_ns: tally.still_blocked.1,
        still_blocked_threads: tally.still_blocked.0,
    }
}
