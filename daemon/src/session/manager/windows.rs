//! Continuous profiling's windows (`vmscoped --continuous`): one root session after another,
//! system-wide, each ending exactly where the next begins, so that every sample is in one
//! window and no sample in two; each window is handed over as a [`Snapshot`] once final (its
//! last samples read, its code maps caught up), and forgotten here once its profiles are built
//! ([`ManagerHandle::window_built`]): until then the binaries and JIT codes its samples are in
//! stay, for the build to name them even when their process is gone.
//!
//! A window is an ordinary session to the rest of the manager: routed, stopped and finalised as
//! any, and listed to root while it runs. The chain only chooses when the next one starts: at
//! the elapsed window's end time, not when the stop is noticed, since sessions select samples
//! by their time ([`crate::session::Session::takes`]).

use super::*;

/// The chain of windows: the request each window is started with, the running one, and
/// where final windows go.
pub(super) struct WindowChain {
    /// Root's system-wide request, its duration the window's length.
    request: SessionRequest,
    /// The running window, when one runs (none after a start failed, until the next tick).
    current: Option<u64>,
    /// Windows stopping or stopped, not yet handed over.
    finishing: Vec<u64>,
    /// Where final windows go; a full channel drops the window, counted.
    out: mpsc::Sender<Snapshot>,
    /// Windows handed over and being built: their binaries and codes stay until then.
    building: Vec<Session>,
    /// Stopped for good (the daemon shutting down, or root stopped the running window): no
    /// window starts again.
    stopped: bool,
}

/// Who continuous windows belong to.
const ROOT: Caller = Caller { uid: 0, pid: None };

/// The stop reason of a window that ran its length.
pub(super) const WINDOW_ENDED: &str = "continuous window ended";

impl WindowChain {
    /// The windows being built: what their samples are in stays meanwhile.
    pub(super) fn building(&self) -> impl Iterator<Item = &Session> {
        self.building.iter()
    }
}

impl Manager {
    /// The continuous windows being built, whose binaries and codes stay meanwhile.
    pub(super) fn windows_building(&self) -> impl Iterator<Item = &Session> {
        self.windows.iter().flat_map(WindowChain::building)
    }

    /// Window `id`'s profiles are built: its binaries and codes may go.
    pub(super) fn window_built(&mut self, id: u64) {
        if let Some(chain) = self.windows.as_mut() {
            let before = chain.building.len();
            chain.building.retain(|s| s.id != id);
            if chain.building.len() < before {
                self.counters.continuous_windows_released += 1;
            }
        }
    }

    /// Starts continuous windows of `request` (system-wide, with the window's length as its
    /// duration), each final one sent to `out`. Answers the first window.
    pub(super) fn start_windows(
        &mut self,
        request: SessionRequest,
        out: mpsc::Sender<Snapshot>,
    ) -> Result<SessionInfo, SessionError> {
        if self.windows.is_some() {
            return Err(SessionError::InvalidArgument(
                "continuous windows are already being taken".into(),
            ));
        }
        if !request.system_wide || request.duration.is_none_or(|d| d.is_zero()) {
            return Err(SessionError::InvalidArgument(
                "continuous windows are system-wide, of a length".into(),
            ));
        }
        let first = self.start_at(ROOT, &request, None)?;
        self.windows = Some(WindowChain {
            request,
            current: Some(first.id),
            finishing: Vec::new(),
            out,
            building: Vec::new(),
            stopped: false,
        });
        Ok(first)
    }

    /// Whether `id` is a continuous window.
    pub(super) fn is_window(&self, id: u64) -> bool {
        self.windows
            .as_ref()
            .is_some_and(|c| c.current == Some(id) || c.finishing.contains(&id))
    }

    /// The elapsed window `id` stopped at `end_ns`: the next one starts there.
    pub(super) fn window_elapsed(&mut self, id: u64, end_ns: u64) {
        let Some(chain) = self.windows.as_mut() else {
            return;
        };
        if chain.current != Some(id) {
            return;
        }
        chain.current = None;
        chain.finishing.push(id);
        self.next_window(Some(end_ns));
    }

    /// Starts the next window, at `start_ns` or now; a failure is logged, counted, and tried
    /// again at the next tick.
    pub(super) fn next_window(&mut self, start_ns: Option<u64>) {
        let Some(request) = self.windows.as_ref().map(|c| c.request.clone()) else {
            return;
        };
        match self.start_at(ROOT, &request, start_ns) {
            Ok(next) => {
                if let Some(chain) = self.windows.as_mut() {
                    chain.current = Some(next.id);
                }
            }
            Err(e) => {
                self.counters.continuous_windows_failed += 1;
                tracing::warn!("the next continuous window did not start: {e}");
            }
        }
    }

    /// A tick: a chain whose last start failed tries again.
    pub(super) fn keep_windows_going(&mut self) {
        if self
            .windows
            .as_ref()
            .is_some_and(|c| c.current.is_none() && !c.stopped)
        {
            self.next_window(None);
        }
    }

    /// A window stopped other than by its end (the daemon shutting down, root's stop): no
    /// successor; it is handed over once final, as the others.
    pub(super) fn window_stopped(&mut self, id: u64) {
        if let Some(chain) = self.windows.as_mut()
            && chain.current == Some(id)
        {
            chain.current = None;
            chain.finishing.push(id);
            chain.stopped = true;
        }
    }

    /// Hands over the windows that became final, and forgets them.
    pub(super) fn hand_over_windows(&mut self) {
        let Some(finishing) = self.windows.as_ref().map(|c| c.finishing.clone()) else {
            return;
        };
        for id in finishing {
            if self
                .sessions
                .get(&id)
                .is_none_or(|s| s.state != State::Stopped)
            {
                continue;
            }
            let snapshot = self.snapshot(id);
            let Some(session) = self.sessions.remove(&id) else {
                continue;
            };
            let Some(chain) = self.windows.as_mut() else {
                return;
            };
            chain.finishing.retain(|&other| other != id);
            match chain.out.try_send(snapshot) {
                Ok(()) => {
                    chain.building.push(session);
                    self.counters.continuous_windows_handed += 1;
                }
                Err(_) => {
                    self.counters.continuous_windows_dropped += 1;
                    tracing::warn!(
                        id,
                        "a continuous window was dropped: its profiles are still being built"
                    );
                }
            }
        }
    }
}
