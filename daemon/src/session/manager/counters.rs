//! The manager's own event counters, and the daemon-wide counters and gauges it reports
//! (`vmscope info`): every component's counters gathered under their public names.

use super::*;
use crate::process::mmap_events::MmapEventCounters;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) batches: u64,
    pub(super) events: u64,
    pub(super) samples_routed: u64,
    pub(super) samples_unrouted: u64,
    /// Blocks off the CPU routed to sessions, and those no session wanted (the session
    /// stopped meanwhile, a target released).
    pub(super) blocks_routed: u64,
    pub(super) blocks_unrouted: u64,
    /// Threads of new off-CPU sessions' targets noted as off their CPU at the start.
    pub(super) blocked_threads_noted: u64,
    pub(super) exec_events: u64,
    /// Threads of followed processes given a name.
    pub(super) rename_events: u64,
    /// Exit events of tracked processes (and, with system-wide sessions, of every process).
    pub(super) exit_events: u64,
    /// Exits after which the process ran on (a leader gone before its threads, or replaced by an
    /// `execve` in another thread): its kernel filter was armed again.
    pub(super) exits_process_ran_on: u64,
    /// Targets' pids found held by another process (another start time, or a leader running
    /// after the target's exited), beyond those the process table counts.
    pub(super) pid_reuses: u64,
    pub(super) malformed_events: u64,
    pub(super) unknown_events: u64,
    pub(super) sessions_started: u64,
    pub(super) sessions_refused: u64,
    /// Continuous windows handed over final, dropped (their profiles still being built) and
    /// that did not start.
    pub(super) continuous_windows_handed: u64,
    pub(super) continuous_windows_dropped: u64,
    pub(super) continuous_windows_failed: u64,
    /// Windows whose profiles were built, their binaries and codes let go.
    pub(super) continuous_windows_released: u64,
    pub(super) stop_timeouts: u64,
    pub(super) sessions_evicted: u64,
    /// Targets that may no longer be sampled for their session: their process now runs as
    /// another user, with another group or with capabilities.
    pub(super) targets_revoked: u64,
    /// Times the kernel kept a target's samples from its sessions because a thread ran with
    /// credentials other than those checked (a setuid `execve`, even one whose event was lost),
    /// and the process was checked again.
    pub(super) target_creds_changed: u64,
    pub(super) stacks_truncated: u64,
    /// Samples whose raw stack was placed before (`placements.rs`), counted without a look
    /// at their process: what the cache saves, against `samples_routed`.
    pub(super) stacks_placed_before: u64,
    /// Threads whose names were read, once for all the sessions that sampled them.
    pub(super) thread_names_read: u64,
    pub(super) user_stacks_failed: u64,
    pub(super) stack_frames_unmapped: u64,
    /// Samples that came with a copy of the user stack, and its bytes in all.
    pub(super) user_copies: u64,
    pub(super) user_copy_bytes: u64,
    /// Java frames named by the JVM's structures (interpreted frames by their method,
    /// compiled ones by their nmethod's method and scopes).
    pub(super) java_frames_named: u64,
    /// Java frames left to the perf map: the code store refused their code.
    pub(super) java_frames_refused: u64,
    /// Targets of frame-pointer sessions whose stacks began to be copied once they mapped
    /// libjvm.so (after their session's start), and those whose could not be (the user's
    /// share, the kernel's map).
    pub(super) jvm_copies_added: u64,
    pub(super) jvm_copies_refused: u64,
    /// Copies that stopped at an unreadable page before the size asked for.
    pub(super) user_copies_faulted: u64,
    /// Targets whose kernel counters were opened, and those whose could not be.
    pub(super) kernel_counters_opened: u64,
    pub(super) kernel_counters_failed: u64,
    /// Targets whose HotSpot performance data was read at the start, and those whose could
    /// not be.
    pub(super) hotspot_perf_data_read: u64,
    pub(super) hotspot_perf_data_failed: u64,
    /// Reads of VMs' counter regions for exact counts, and those that failed (the process
    /// exited, its memory was unreadable or did not answer in time).
    pub(super) exact_count_reads: u64,
    pub(super) exact_count_reads_failed: u64,
    /// Samples that carried their thread's send counter.
    pub(super) samples_with_sends: u64,
    /// Of those, samples in a session whose counter grew more than a thread can send
    /// ([`crate::session::MAX_SENDS_PER_NS`]): no sends counted.
    pub(super) sends_implausible: u64,
    /// Samples that carried their thread's label set id (0 included: no labels set now).
    pub(super) samples_with_labels: u64,
    /// Of those, samples whose label set was never published: counted unlabelled.
    pub(super) labels_unknown: u64,
}

impl Manager {
    /// The daemon's counters and gauges, as `vmscope info` shows them.
    pub(super) fn daemon_counters(&self) -> DaemonCounters {
        let c = &self.counters;
        let p = self.processes.counters();
        let (log, log_processes, log_mappings) = self.processes.log_counters();
        let events = match &self.mmap_events {
            Some(events) => events.counters(),
            // None could be opened: every CPU failed.
            None if self.config.mapping_records => MmapEventCounters {
                open_failures: u64::from(self.online_cpus),
                ..Default::default()
            },
            None => MmapEventCounters::default(),
        };
        let m = self.modules.counters();
        let l = self.modules.lines().counters();
        let warmer = self.warmer.counters();
        let j = self.codemaps.counters();
        let u = self.unwinder.counters();
        let r = self.process_memory.counters();
        let a = self.process_access.counters();
        let store = self.codemaps.store().counters();
        let kernel_lost = self.sampler.lost().unwrap_or_default();
        let off_cpu = kernel_lost.off_cpu;
        let (gc_reads, gc_reads_failed, gc_refused) = self.vms.gcs.counts();
        let values = [
            ("batches", c.batches),
            ("events", c.events),
            ("samples_routed", c.samples_routed),
            ("samples_unrouted", c.samples_unrouted),
            ("blocks_routed", c.blocks_routed),
            ("blocks_unrouted", c.blocks_unrouted),
            ("blocked_threads_noted", c.blocked_threads_noted),
            ("samples_shed_for_root", kernel_lost.shed_total()),
            (
                "off_cpu_threads_unfollowed",
                off_cpu[vmscope_common::OFF_CPU_UNFOLLOWED as usize],
            ),
            (
                "off_cpu_copies_not_kept",
                off_cpu[vmscope_common::OFF_CPU_COPIES_FULL as usize],
            ),
            (
                "off_cpu_short_blocks",
                kernel_lost
                    .short_blocks
                    .values()
                    .map(|b| b.count)
                    .sum::<u64>()
                    + off_cpu[vmscope_common::OFF_CPU_SHORT as usize],
            ),
            ("exec_events", c.exec_events),
            ("rename_events", c.rename_events),
            ("exit_events", c.exit_events),
            ("exits_process_ran_on", c.exits_process_ran_on),
            ("pid_reuses", c.pid_reuses + p.pid_reuses),
            ("malformed_events", c.malformed_events),
            ("unknown_events", c.unknown_events),
            ("sessions_started", c.sessions_started),
            ("sessions_refused", c.sessions_refused),
            ("continuous_windows_handed", c.continuous_windows_handed),
            ("continuous_windows_dropped", c.continuous_windows_dropped),
            ("continuous_windows_failed", c.continuous_windows_failed),
            ("continuous_windows_released", c.continuous_windows_released),
            ("sessions_evicted", c.sessions_evicted),
            ("stop_timeouts", c.stop_timeouts),
            ("targets_revoked", c.targets_revoked),
            ("target_creds_changed", c.target_creds_changed),
            ("stacks_truncated", c.stacks_truncated),
            ("stacks_placed_before", c.stacks_placed_before),
            ("thread_names_read", c.thread_names_read),
            ("user_stacks_failed", c.user_stacks_failed),
            ("stack_frames_unmapped", c.stack_frames_unmapped),
            ("user_copies", c.user_copies),
            ("user_copy_bytes", c.user_copy_bytes),
            ("java_frames_named", c.java_frames_named),
            ("java_frames_refused", c.java_frames_refused),
            ("jvm_copies_added", c.jvm_copies_added),
            ("jvm_copies_refused", c.jvm_copies_refused),
            ("user_copies_faulted", c.user_copies_faulted),
            ("kernel_counters_opened", c.kernel_counters_opened),
            ("kernel_counters_failed", c.kernel_counters_failed),
            ("hotspot_perf_data_read", c.hotspot_perf_data_read),
            ("hotspot_perf_data_failed", c.hotspot_perf_data_failed),
            ("exact_count_reads", c.exact_count_reads),
            ("exact_count_reads_failed", c.exact_count_reads_failed),
            ("samples_with_sends", c.samples_with_sends),
            ("sends_implausible", c.sends_implausible),
            ("samples_with_labels", c.samples_with_labels),
            ("labels_unknown", c.labels_unknown),
            ("thread_counters_set", self.thread_counters.set),
            ("thread_counters_refused", self.thread_counters.refused),
            ("jvm_gc_reads", gc_reads),
            ("jvm_gc_reads_failed", gc_reads_failed),
            ("jvm_gc_watches_refused", gc_refused),
            (
                "jvm_gc_waits_dropped",
                self.sessions
                    .values()
                    .filter_map(|s| s.off_cpu.as_ref())
                    .map(|t| t.gc_waits_dropped)
                    .sum(),
            ),
            ("vm_stats", self.vms.taken),
            ("vm_stats_dropped", self.vms.dropped),
            ("vm_intervals_forgotten", self.vms.intervals_forgotten()),
            ("unwind_frames", u.frames),
            ("unwind_trampolines", u.trampolines),
            ("unwinders_built", u.unwinders_built),
            ("unwind_modules_added", u.modules_added),
            ("unwind_modules_without_tables", u.modules_without_tables),
            ("unwind_tables_loaded", u.tables_loaded),
            ("unwind_tables_shared", u.tables_shared),
            ("unwind_table_failures", u.table_failures),
            ("unwind_vdso_failures", u.vdso_failures),
            ("unwind_java_frames", u.java_frames),
            ("unwind_jvms_attached", u.jvms_attached),
            ("unwind_jvms_refused", u.jvms_refused),
            ("unwind_jvm_blobs_scanned", u.jvm_blobs_scanned),
            ("unwind_jvm_blobs_confirmed", u.jvm_blobs_confirmed),
            ("process_memory_reads", r.reads),
            ("process_memory_cache_hits", r.cache_hits),
            ("process_memory_failures", r.failures),
            ("process_memory_reads_stalled", r.stalled),
            ("process_reads_abandoned", a.abandoned),
            ("process_reads_refused", a.refused + a.no_thread),
            ("maps_reads_stalled", p.maps_reads_stalled),
            ("maps_reads", p.maps_reads),
            ("maps_read_failures", p.maps_read_failures),
            ("maps_reads_for_callers", p.caller_refreshes),
            ("maps_bad_lines", p.maps_bad_lines),
            ("maps_from_records", p.maps_from_records),
            ("mapping_records", log.records),
            ("mapping_records_lost", log.lost),
            ("mapping_records_dropped", log.dropped),
            ("mapping_records_malformed", events.malformed),
            ("mapping_record_cpus_failed", events.open_failures),
            ("mapping_record_processes_evicted", log.evicted),
            ("processes_exited", p.exits_noticed),
            ("modules_registered", m.registered),
            ("modules_open_failures", m.open_failures),
            ("modules_parsed", m.parsed),
            ("modules_build_id_hits", m.build_id_hits),
            ("modules_parse_failures", m.parse_failures),
            ("modules_closed", m.closed),
            ("modules_tables_released", m.tables_released),
            ("symbols_warmed_ahead", warmer.0),
            ("symbols_warming_deferred", warmer.1),
            ("dwarf_loaded", l.loaded),
            ("dwarf_from_debug_files", l.from_debug_files),
            ("dwarf_evicted", l.evicted),
            ("dwarf_shed", l.shed),
            ("dwarf_failures", l.failures),
            ("dwarf_missing", l.missing),
            ("dwarf_lookup_failures", l.lookup_failures),
            ("dwarf_releases", l.releases),
            ("dwarf_answers_ready_for_profiles", l.profile_answers_ready),
            ("dwarf_lookups_by_profiles", l.profile_lookups),
            ("jit_samples_attributed", j.attributed),
            ("jit_samples_unexplained", j.unexplained),
            ("code_map_changes", j.changes),
            ("code_map_changes_refused", j.changes_refused),
            ("code_map_changes_late", j.changes_late),
            ("jit_samples_late", j.samples_late),
            ("jit_samples_provisional", j.provisional),
            ("jit_samples_caught_up", j.caught_up),
            ("jit_samples_provisional_expired", j.expired),
            ("jit_samples_from_later_snapshot", j.later_snapshot),
            ("jvms", self.jvms.counters.jvms),
            ("jvm_perf_map_requests", self.jvms.counters.requests),
            ("jvm_perf_map_snapshots", self.jvms.counters.snapshots),
            ("jvm_perf_map_failures", self.jvms.counters.failures),
            ("jvm_perf_map_refused", self.jvms.counters.refused),
            ("jvm_perf_map_request_ms", self.jvms.counters.request_ms),
            (
                "jvm_perf_maps_removed",
                self.jvms.counters.perf_maps_removed,
            ),
            ("code_map_entries_refused", j.source_refusals),
            ("code_map_entries_mapped_late", j.mapped_late),
            ("code_map_sources", j.sources),
            ("code_map_reads_deferred", j.reads_deferred),
            ("code_map_reads", j.reads),
            ("code_map_read_threads_started", j.read_threads_started),
            ("code_map_reads_served_inline", j.reads_served_inline),
            ("code_map_reads_stale", j.reads_stale),
            ("code_map_reads_panicked", j.reads_panicked),
            ("code_map_source_failures", j.source_failures),
            ("code_store_refused_per_user", store.refused_per_user),
            ("code_store_refused_non_root", store.refused_non_root),
            ("code_store_refused_total", store.refused_total),
            ("code_store_reclaimed_codes", store.reclaimed_codes),
            ("code_store_reclaimed_bytes", store.reclaimed_bytes),
        ];
        let refused = crate::codemap::refusals::Reason::ALL.map(|reason| {
            (
                reason.counter(),
                j.refused.get(&reason).copied().unwrap_or(0),
            )
        });
        let unwound = StackEnd::ALL.map(|end| (end.counter(), u.ended(end)));
        let store = self.codemaps.store();
        let gauges = [
            ("modules_open_now", m.open_now),
            ("dwarf_bytes", l.bytes),
            (
                "jit_samples_awaiting_code_map",
                self.codemaps.provisional() as u64,
            ),
            ("code_map_reads_in_flight", j.reads_in_flight),
            ("code_map_processes", self.codemaps.tracked() as u64),
            ("code_map_read_threads", j.read_threads),
            ("process_read_threads", a.threads),
            ("process_reads_stuck", a.stuck),
            ("mapping_record_processes", log_processes as u64),
            ("mapping_records_kept", log_mappings as u64),
            ("code_store_codes", store.len() as u64),
            ("code_store_bytes", store.bytes() as u64),
            ("kernel_event_fds", self.kernel_counter_fds() as u64),
            ("thread_counters_read", self.thread_counters.held().0 as u64),
        ];
        DaemonCounters {
            values: values.into_iter().chain(refused).chain(unwound).collect(),
            gauges: gauges.into_iter().collect(),
        }
    }
}
