//! Symbolisation done ahead, while sessions sample, so that a stop does not wait for all of it.
//!
//! A profile names every distinct native location of its session: the binary's symbol table
//! parsed, the DWARF unit of the address parsed and its lines looked up. Done only when the
//! profile is asked for, that work all waited for the stop: the first system-wide session of a
//! fresh daemon (83 processes) took 6.4 to 19.4 s for `--duration 5`. So the session manager
//! hands each running session's new native locations, once a second, to the warmer's thread,
//! which does the same lookups then; the answers stay in the registry's caches (the parsed
//! symbol tables, the line tables' answers), where the profile finds them.
//!
//! Its thread runs at the daemon's priority (`vmscoped --nice`): the lookups are due anyway,
//! and done at a lower one they waited, on a busy host, for the stop they were to spare.
//!
//! The warmer is a courtesy, never a dependency: its queue is bounded and a batch that does
//! not fit waits for the next tick (the profile does the rest), and a lookup that fails here fails
//! the same way, counted, when the profile asks.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc::{Receiver, SyncSender, TrySendError, sync_channel},
    },
    thread,
};

use super::{Modules, lines::Asker};
use crate::vocab::Location;

/// Batches waiting for the warmer, at most.
const QUEUED_BATCHES: usize = 4;

/// Most locations one batch holds.
pub const MAX_BATCH: usize = 4096;

/// Counters of the warmer.
#[derive(Debug, Default)]
pub struct WarmerCounters {
    /// Locations looked up ahead.
    pub warmed: AtomicU64,
    /// Batches refused because the queue was full (sent again later).
    pub deferred: AtomicU64,
}

/// The manager's handle on the warmer's thread; dropping it ends the thread.
#[derive(Debug)]
pub struct Warmer {
    queue: Option<SyncSender<Vec<Location>>>,
    counters: Arc<WarmerCounters>,
}

impl Warmer {
    /// Starts the warmer's thread over `modules`. A warmer whose thread cannot start takes no
    /// batch: profiles do all the work, as before.
    pub fn spawn(modules: Arc<Modules>) -> Warmer {
        let (queue, batches) = sync_channel(QUEUED_BATCHES);
        let counters = Arc::new(WarmerCounters::default());
        let theirs = counters.clone();
        let spawned = thread::Builder::new()
            .name("symbol-warmer".into())
            .spawn(move || run(&modules, &batches, &theirs));
        if let Err(e) = &spawned {
            tracing::warn!("no symbolisation ahead of profiles: cannot start its thread: {e}");
        }
        Warmer {
            queue: spawned.ok().map(|_| queue),
            counters,
        }
    }

    /// A warmer that takes nothing (tests of the manager).
    pub fn none() -> Warmer {
        Warmer {
            queue: None,
            counters: Arc::default(),
        }
    }

    /// Hands `batch` to the thread; answers whether it took it (else send it again later).
    pub fn offer(&self, batch: Vec<Location>) -> bool {
        let Some(queue) = &self.queue else {
            return true;
        };
        match queue.try_send(batch) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.counters.deferred.fetch_add(1, Ordering::Relaxed);
                false
            }
            // The thread is gone: nothing more to do ahead.
            Err(TrySendError::Disconnected(_)) => true,
        }
    }

    /// Locations looked up ahead, and batches deferred.
    pub fn counters(&self) -> (u64, u64) {
        (
            self.counters.warmed.load(Ordering::Relaxed),
            self.counters.deferred.load(Ordering::Relaxed),
        )
    }
}

/// The thread: each batch's locations in binaries, their symbols and source lines looked up.
fn run(modules: &Modules, batches: &Receiver<Vec<Location>>, counters: &WarmerCounters) {
    while let Ok(batch) = batches.recv() {
        let _in_use = modules.in_use();
        for location in batch {
            let Location::File { module, offset, .. } = location else {
                continue;
            };
            let Some(module) = modules.get(module) else {
                continue;
            };
            // Both cached where the profile looks: the symbol table, the lines' answer.
            let _ = module.symbols(modules);
            let _ = module.source_frames(modules, offset, Asker::Ahead);
            counters.warmed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::FileId;
    use std::time::{Duration, Instant};

    #[test]
    fn locations_offered_are_looked_up_ahead() {
        let modules = Arc::new(Modules::new());
        let exe = std::env::current_exe().unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let id = FileId {
            dev_major: 0,
            dev_minor: 0,
            inode: std::os::unix::fs::MetadataExt::ino(&meta),
        };
        let module = modules.register(id, &exe, || std::fs::File::open(&exe));
        let warmer = Warmer::spawn(modules.clone());
        let batch: Vec<Location> = (0..10)
            .map(|i| Location::File {
                module,
                offset: 0x1000 + i * 64,
                main_executable: true,
            })
            .chain([Location::Kernel { ip: 1 }])
            .collect();
        assert!(warmer.offer(batch));
        let deadline = Instant::now() + Duration::from_secs(30);
        while warmer.counters().0 < 10 {
            assert!(
                Instant::now() < deadline,
                "not warmed: {:?}",
                warmer.counters()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            warmer.counters().0,
            10,
            "kernel locations are not the warmer's"
        );
        assert_eq!(modules.counters().parsed, 1, "the symbols parsed, once");
        // A full queue defers, never blocks the manager.
        let mut deferred = false;
        for _ in 0..64 {
            let big: Vec<Location> = (0..MAX_BATCH as u64)
                .map(|i| Location::File {
                    module,
                    offset: i,
                    main_executable: true,
                })
                .collect();
            deferred |= !warmer.offer(big);
        }
        assert!(deferred && warmer.counters().1 > 0);
    }
}
