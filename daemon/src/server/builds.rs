//! Profile builds: each user's share of them, and what they cost.
//!
//! A profile is built from a copy of its session's stacks on a blocking thread, in memory and
//! CPU time that grow with the session's distinct stacks (at most `--max-stacks-per-session`).
//! A user other than root may have [`BUILDS`]`.per_user` builds under way (watches included);
//! a request beyond waits for one of them to end, [`BUILD_WAIT`] at most, then is refused with
//! RESOURCE_EXHAUSTED. A request waits only for shares its own user (or, for the non-root
//! share, users other than root) holds: root keeps the room between the non-root share and the
//! total, and never waits behind another user's builds. A waiting request holds nothing but
//! its stream. A share is held from before the copy is taken until the build ends or is given
//! up (its client went away: see [`crate::cancel`]).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use tokio::sync::Notify;
use tonic::Status;

use crate::shares::{Share, ShareLimits, Shares};

/// Profile builds under way at once: per user other than root, all of them, everyone.
pub const BUILDS: ShareLimits = ShareLimits {
    per_user: 2,
    non_root: 4,
    total: 64,
};

/// Longest a profile request waits for one of its user's builds to end.
pub const BUILD_WAIT: Duration = Duration::from_secs(10);

/// The nice value of a build for a user other than root: that of the user's own programs, below
/// the daemon's own threads (`vmscoped --nice`: the manager, the ring-buffer reader, the gRPC
/// runtime, root's builds), so that another user's builds never hold those up.
pub const USER_BUILD_NICE: i32 = 0;

/// Runs `build` at [`USER_BUILD_NICE`] on this (pooled) thread when `uid` is not root, and
/// gives the thread its nice value back after.
pub fn at_user_priority<T>(uid: u32, build: impl FnOnce() -> T) -> T {
    let before = (uid != 0)
        .then(crate::sys::thread_nice)
        .and_then(Result::ok)
        .filter(|&nice| nice < USER_BUILD_NICE && crate::sys::set_nice(USER_BUILD_NICE).is_ok());
    let result = build();
    if let Some(nice) = before
        && let Err(e) = crate::sys::set_nice(nice)
    {
        tracing::warn!("a build thread stays at nice {USER_BUILD_NICE}: {e}");
    }
    result
}

/// What the builds counted since the daemon started.
#[derive(Debug, Default)]
pub struct BuildCounters {
    /// Builds started (a share taken).
    pub started: AtomicU64,
    /// Requests refused for want of a share.
    pub refused: AtomicU64,
    /// Builds given up because their client went away.
    pub cancelled: AtomicU64,
    /// Watches dropped because their client read nothing for [`super::WATCH_UNREAD_LIMIT`].
    pub watches_dropped_unread: AtomicU64,
}

impl BuildCounters {
    /// Name and value of each, for `GetDaemonInfo`.
    pub fn values(&self) -> [(&'static str, u64); 4] {
        [
            ("profile_builds_started", self.started.load(Relaxed)),
            ("profile_builds_refused", self.refused.load(Relaxed)),
            ("profile_builds_cancelled", self.cancelled.load(Relaxed)),
            (
                "watches_dropped_unread",
                self.watches_dropped_unread.load(Relaxed),
            ),
        ]
    }
}

/// The shares of profile builds, and their counters.
#[derive(Debug)]
pub struct Builds {
    shares: Arc<Shares>,
    /// Told when a build ends, for the requests that wait for a share.
    ended: Notify,
    /// What happened to builds so far.
    pub counters: BuildCounters,
}

/// One build's share; its end wakes the requests waiting for one.
#[derive(Debug)]
pub struct BuildShare {
    share: Option<Share>,
    builds: Arc<Builds>,
}

impl Drop for BuildShare {
    fn drop(&mut self) {
        drop(self.share.take());
        self.builds.ended.notify_waiters();
    }
}

impl Builds {
    /// No build under way, with `limits`.
    pub fn new(limits: ShareLimits) -> Arc<Builds> {
        Arc::new(Builds {
            shares: Shares::new(limits),
            ended: Notify::new(),
            counters: BuildCounters::default(),
        })
    }

    /// A share for one build by `uid` now, if there is one (a watch skips an interval
    /// without).
    pub fn try_take(self: &Arc<Self>, uid: u32) -> Option<BuildShare> {
        let share = self.shares.take(uid).ok()?;
        self.counters.started.fetch_add(1, Relaxed);
        Some(BuildShare {
            share: Some(share),
            builds: self.clone(),
        })
    }

    /// A share for one build by `uid`, waiting up to `wait` for one to be given back; or the
    /// status that refuses it.
    pub async fn take(self: &Arc<Self>, uid: u32, wait: Duration) -> Result<BuildShare, Status> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Listening before looking: a build that ends in between is not missed.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let refusal = match self.shares.take(uid) {
                Ok(share) => {
                    self.counters.started.fetch_add(1, Relaxed);
                    return Ok(BuildShare {
                        share: Some(share),
                        builds: self.clone(),
                    });
                }
                Err(refusal) => refusal,
            };
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                self.counters.refused.fetch_add(1, Relaxed);
                return Err(Status::resource_exhausted(format!(
                    "profile builds under way: {refusal}, for {wait:?}; ask again once one is \
                     done"
                )));
            }
        }
    }

    /// Builds under way now.
    pub fn in_flight(&self) -> usize {
        self.shares.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_user_beyond_its_share_waits_then_is_refused_and_root_is_not() {
        const NOW: Duration = Duration::ZERO;
        let builds = Builds::new(BUILDS);
        let mut held = Vec::new();
        for _ in 0..BUILDS.per_user {
            held.push(builds.take(1000, NOW).await.unwrap());
        }
        let refused = builds.take(1000, NOW).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("uid 1000 holds 2"),
            "{}",
            refused.message()
        );
        assert!(builds.try_take(1000).is_none());
        // Another user has its own share; all of them together are held to theirs.
        let other: Vec<_> = (0..BUILDS.per_user)
            .map(|_| builds.try_take(1001).unwrap())
            .collect();
        assert!(
            builds.try_take(1002).is_none(),
            "the non-root share is full"
        );
        let root = builds
            .take(0, NOW)
            .await
            .expect("root never waits for users");
        assert_eq!(builds.in_flight(), 5);
        // A waiting request gets the share a build gives back.
        let waiting = tokio::spawn({
            let builds = builds.clone();
            async move { builds.take(1000, Duration::from_secs(10)).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        held.pop();
        waiting.await.unwrap().expect("the share given back");
        drop((held, other, root));
        assert_eq!(builds.in_flight(), 0);
        let values = builds.counters.values();
        assert_eq!(values[0], ("profile_builds_started", 6));
        assert_eq!(values[1], ("profile_builds_refused", 1));
    }
}
