//! Driving the HotSpot targets: asking a JVM for its perf map when its samples need one, and
//! taking its answer.

use super::*;
use crate::session::{CallGraph, request::SessionSpec};

impl Manager {
    /// Whether the session lets its HotSpot targets be asked for their perf map.
    pub(super) fn jvm_attach(&self, id: u64) -> bool {
        self.config.jvm_attach
            && self
                .sessions
                .get(&id)
                .is_some_and(|s| s.spec.jvm_attach && !s.spec.system_wide)
    }

    /// Notes which targets of a session are HotSpot JVMs (they map libjvm.so), as far as their
    /// mappings show now (a command recorded from its start loads it later).
    pub(super) fn observe_jvms(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        if session.spec.system_wide {
            return;
        }
        let pids: Vec<u32> = session.held_pids();
        for pid in pids {
            if self.jvms.is_jvm(pid) {
                continue;
            }
            if self.maps_libjvm(pid) {
                self.jvms.observe(pid);
            }
        }
    }

    /// Whether `pid`, as the process table last read it, maps HotSpot's `libjvm.so`.
    fn maps_libjvm(&self, pid: u32) -> bool {
        let Some(process) = self.processes.get(pid) else {
            return false;
        };
        let modules = &self.modules;
        !process.gone
            && process
                .file_mappings()
                .any(|(_, _, module)| modules.get(module).is_some_and(|m| m.is_libjvm()))
    }

    /// The targets of a frame-pointer session whose stacks the kernel must copy as well: the
    /// JVMs among them whose compiled code keeps no frame pointer, so that their Java frames
    /// are unwound by the JVM's own layout. A command recorded from its start maps libjvm.so
    /// only later, and is walked by frame pointers alone.
    pub(super) fn java_copy_targets(&self, spec: &SessionSpec) -> Vec<u32> {
        if !self.config.java_frames
            || spec.call_graph != CallGraph::FramePointers
            || spec.system_wide
        {
            return Vec::new();
        }
        spec.pids
            .iter()
            .copied()
            .filter(|&pid| {
                self.maps_libjvm(pid)
                    && !crate::jvm::options::read(pid)
                        .unwrap_or_default()
                        .preserve_frame_pointer
            })
            .collect()
    }

    /// Reads the whole code cache of the JVM targets whose stacks `spec`'s session unwinds
    /// from copies (dwarf, or a frame-pointer session's Java copies), before its first
    /// sample: code compiled before the session then names its samples from the first.
    pub(super) fn scan_jvm_targets(&mut self, spec: &SessionSpec) {
        if !self.config.java_frames || spec.system_wide {
            return;
        }
        let pids: Vec<u32> = match spec.call_graph {
            CallGraph::Dwarf { .. } => spec
                .pids
                .iter()
                .copied()
                .filter(|&pid| self.maps_libjvm(pid))
                .collect(),
            CallGraph::FramePointers => spec.java_copies.clone(),
            CallGraph::None => Vec::new(),
        };
        for pid in pids {
            if let Some(process) = self.processes.get(pid) {
                self.unwinder.scan_jvm(process, &mut self.process_memory);
            }
        }
    }

    /// Finds HotSpot targets of running sessions, and asks those whose samples in code no map
    /// explains pile up for a new perf map.
    pub(super) fn tick_jvms(&mut self, now_ns: u64) {
        let running: Vec<u64> = self.running().map(|s| s.id).collect();
        for id in running {
            self.observe_jvms(id);
            if !self.jvm_attach(id) {
                continue;
            }
            for pid in self.sessions[&id].held_pids() {
                if self.jvms.is_jvm(pid)
                    && self.codemaps.unexplained_since_snapshot(pid)
                        >= crate::session::jvm::UNEXPLAINED_BEFORE_ASKING
                {
                    self.ask_jvm(pid, now_ns, false);
                }
            }
        }
    }

    /// Asks `pid` for its perf map if it is a JVM that may be asked: at once when `urgent`,
    /// else once the wait its last snapshots call for has passed (the code maps count what
    /// they named).
    pub(super) fn ask_jvm(&mut self, pid: u32, now_ns: u64, urgent: bool) {
        let named = self.codemaps.named_by_snapshots(pid);
        self.jvms.request(pid, now_ns, urgent, named);
    }

    /// A JVM answered a perf map request: the map is read now, as a new snapshot, and samples
    /// it explains are named from it.
    pub(super) fn jvm_answered(&mut self, mut reply: JvmReply) {
        let now = sys::monotonic_ns();
        if self.jvms.answered(&mut reply) {
            self.touch_code_maps(reply.pid);
            self.codemaps.perf_map_rewritten(reply.pid);
            self.advance_code_maps(reply.pid, now);
        }
        self.finalize_ready(now);
    }
}
