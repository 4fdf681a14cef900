//! Watch streams: a session's profile every interval, for as long as the client reads them.
//!
//! A watch builds its next profile only once the transport asked for more after taking the
//! last one (it asks once the last was handed over to the connection's flow control: the
//! client is reading); an interval passes without a build otherwise. A client that takes none
//! for [`WATCH_UNREAD_LIMIT`] is dropped: the stream ends with RESOURCE_EXHAUSTED. An unread
//! watch thus holds at most the one profile its transport was sending, and keeps its place in
//! the user's share of watches until the connection lets the stream go. Builds take a share of
//! the user's profile builds like GetProfile; a watch whose user has none free skips the
//! interval.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::Status;
use vmscope_proto::v1 as pb;

use super::{ProfileStream, ProfilerService};
use crate::{session::Caller, shares::Share};

/// Longest a watch's client may leave a profile untaken before the watch is dropped.
pub const WATCH_UNREAD_LIMIT: Duration = Duration::from_secs(5);

/// The stream the transport reads a watch from. It notes when the transport asks for more
/// than there is: the last profile was taken and handed on.
struct WatchStream {
    profiles: mpsc::Receiver<Result<pb::Profile, Status>>,
    drained: Arc<AtomicBool>,
    /// The watch's place in its user's share, held as long as the transport holds the stream.
    _permit: Share,
}

impl Stream for WatchStream {
    type Item = Result<pb::Profile, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.profiles.poll_recv(cx);
        if next.is_pending() {
            self.drained.store(true, Relaxed);
        }
        next
    }
}

impl ProfilerService {
    /// Starts the watch of `session` by `caller` every `interval`; `permit` (its place in the
    /// user's share of watches) is held by the stream.
    pub(super) fn watch(
        &self,
        caller: Caller,
        session: u64,
        interval: Duration,
        permit: Share,
    ) -> ProfileStream {
        // Nothing waits in it but the last profile, or the reason the watch was dropped.
        let (tx, profiles) = mpsc::channel(1);
        let drained = Arc::new(AtomicBool::new(true));
        let service = self.clone();
        let mut shutdown = self.shutdown.clone();
        let taken = drained.clone();
        tokio::spawn(async move {
            let mut sent_at: Option<Instant> = None;
            loop {
                if !taken.load(Relaxed) {
                    if sent_at.is_some_and(|at| at.elapsed() >= WATCH_UNREAD_LIMIT) {
                        service
                            .builds
                            .counters
                            .watches_dropped_unread
                            .fetch_add(1, Relaxed);
                        tracing::info!(
                            uid = caller.uid,
                            session,
                            "watch dropped: its client read no profile for {WATCH_UNREAD_LIMIT:?}"
                        );
                        let _ = tx.try_send(Err(Status::resource_exhausted(format!(
                            "watch dropped: the client read no profile for {WATCH_UNREAD_LIMIT:?}"
                        ))));
                        break;
                    }
                } else if let Some(share) = service.builds.try_take(caller.uid) {
                    // At shutdown the daemon stops the sessions first: this profile is then the
                    // final one, and the watch ends with it.
                    let shutting_down = *shutdown.borrow_and_update();
                    // Watches stream our message only: pprof is for GetProfile.
                    let profile = service
                        .build(share, caller, session, false, super::ProfileCut::default())
                        .await;
                    // The stopped session's profile is the last: it changes no more, whole or
                    // not.
                    let last = shutting_down
                        || profile.as_ref().map_or(true, |p| {
                            p.session
                                .as_ref()
                                .is_some_and(|s| s.state() == pb::SessionState::Stopped)
                        });
                    taken.store(false, Relaxed);
                    // A client that went away closes the channel; that ends the watch. The
                    // channel is empty: the transport asked for more since the last.
                    if tx.send(profile).await.is_err() || last {
                        break;
                    }
                    sent_at = Some(Instant::now());
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = tx.closed() => break,
                    _ = shutdown.changed() => {}
                }
            }
        });
        Box::pin(WatchStream {
            profiles,
            drained,
            _permit: permit,
        })
    }
}
