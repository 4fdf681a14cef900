//! Who may hold a connection to the daemon, and for how long without speaking.
//!
//! Every local user may connect, so connections are a shared resource that one careless or
//! hostile user could take from all: each costs the daemon a file descriptor and some memory,
//! and the daemon's descriptors also open binaries and code maps. So the accept loop
//!
//! * counts connections per uid and refuses a user other than root beyond its share, and all
//!   such users together beyond theirs: root's capacity is what they can never take;
//! * gives each connection a deadline to send the HTTP/2 client preface (a socket that never
//!   speaks is closed, and until then holds a slot of its own user's share only);
//! * backs off when the process runs out of descriptors instead of spinning on `accept`.
//!
//! A refused client gets an HTTP/2 GOAWAY (ENHANCE_YOUR_CALM) that says why, then the close.

use std::{
    fmt, io,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use tokio::{
    io::AsyncReadExt as _,
    net::{UnixListener, UnixStream},
    sync::{mpsc, watch},
};
use tokio_stream::{Stream, wrappers::ReceiverStream};

use super::authority::FixedAuthority;
use crate::shares::{self, Share, ShareLimits, Shares};

/// What every HTTP/2 client sends first (RFC 9113, 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Longest pause of the accept loop when the process is out of descriptors or memory.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// How many connections the daemon holds, and how long one may stay silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections one user other than root may hold.
    pub per_user: usize,
    /// Most connections all users other than root may hold together.
    pub non_root: usize,
    /// Most connections of everyone, root included: kept well below the descriptor limit, so
    /// that the daemon can still open binaries and code maps.
    pub total: usize,
    /// Time a new connection has to send the HTTP/2 preface.
    pub handshake: Duration,
    /// Requests one connection may have in flight at once (HTTP/2 concurrent streams).
    pub streams_per_connection: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            // A build farm's worth of concurrent clients of one user, and 8 such users.
            per_user: 128,
            non_root: 1024,
            total: 4096,
            handshake: Duration::from_secs(5),
            streams_per_connection: 64,
        }
    }
}

impl ConnectionLimits {
    /// These limits with `total` (and `non_root` below it) lowered to fit in a process allowed
    /// `max_fds` descriptors: half of them, and a quarter of them for users other than root.
    pub fn fitted_to(self, max_fds: u64) -> ConnectionLimits {
        let half = usize::try_from(max_fds / 2).unwrap_or(usize::MAX).max(1);
        let total = self.total.min(half);
        ConnectionLimits {
            total,
            non_root: self.non_root.min(total / 2),
            ..self
        }
    }
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The kernel gave no peer credentials: nothing could be authorised on it.
    NoCredentials,
    /// A share was full.
    Share(shares::Refusal),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoCredentials => write!(f, "the socket gave no peer credentials"),
            Refusal::Share(refusal @ shares::Refusal::PerUser { .. }) => write!(
                f,
                "connections to vmscoped: {refusal}; close some (vmscoped \
                 --max-connections-per-user)"
            ),
            Refusal::Share(refusal @ shares::Refusal::NonRoot { .. }) => write!(
                f,
                "connections to vmscoped: {refusal}; try later (vmscoped \
                 --max-connections-non-root)"
            ),
            Refusal::Share(refusal) => write!(f, "connections to vmscoped: {refusal}; try later"),
        }
    }
}

/// Counters of the accept loop, for `vmscope info`; they only go up.
#[derive(Debug, Default)]
pub struct ConnectionCounters {
    /// Connections accepted (before any refusal).
    pub accepted: AtomicU64,
    /// Connections closed after being admitted, whatever the reason.
    pub closed: AtomicU64,
    /// Refused: a user's share was full.
    pub refused_per_user: AtomicU64,
    /// Refused: the share of users other than root was full.
    pub refused_non_root: AtomicU64,
    /// Refused: the daemon's total was reached, or no peer credentials.
    pub refused_total: AtomicU64,
    /// Closed for not sending the HTTP/2 preface in time.
    pub handshake_timeouts: AtomicU64,
    /// Closed for sending something other than the HTTP/2 preface.
    pub bad_prefaces: AtomicU64,
    /// `accept` failures (out of descriptors, out of memory...), each followed by a pause.
    pub accept_errors: AtomicU64,
}

impl ConnectionCounters {
    /// Name and value of each counter.
    pub fn values(&self) -> [(&'static str, u64); 8] {
        [
            ("connections_accepted", self.accepted.load(Relaxed)),
            ("connections_closed", self.closed.load(Relaxed)),
            (
                "connections_refused_per_user",
                self.refused_per_user.load(Relaxed),
            ),
            (
                "connections_refused_non_root",
                self.refused_non_root.load(Relaxed),
            ),
            (
                "connections_refused_total",
                self.refused_total.load(Relaxed),
            ),
            (
                "connections_handshake_timeouts",
                self.handshake_timeouts.load(Relaxed),
            ),
            ("connections_bad_prefaces", self.bad_prefaces.load(Relaxed)),
            ("accept_errors", self.accept_errors.load(Relaxed)),
        ]
    }
}

/// The connections the daemon holds, per user, against [`ConnectionLimits`].
#[derive(Debug)]
pub struct Connections {
    limits: ConnectionLimits,
    shares: Arc<Shares>,
    /// What the accept loop did.
    pub counters: ConnectionCounters,
}

impl Connections {
    /// No connection yet.
    pub fn new(limits: ConnectionLimits) -> Arc<Connections> {
        Arc::new(Connections {
            limits,
            shares: Shares::new(ShareLimits {
                per_user: limits.per_user,
                non_root: limits.non_root,
                total: limits.total,
            }),
            counters: ConnectionCounters::default(),
        })
    }

    /// A slot for a connection of `uid`, held until the slot is dropped; or why not.
    pub fn admit(self: &Arc<Self>, uid: Option<u32>) -> Result<Slot, Refusal> {
        let uid = uid.ok_or(Refusal::NoCredentials)?;
        let share = self.shares.take(uid).map_err(Refusal::Share)?;
        Ok(Slot {
            connections: self.clone(),
            share,
        })
    }

    /// Connections held now, by everyone.
    pub fn held(&self) -> usize {
        self.shares.held()
    }

    /// Connections `uid` holds now.
    pub fn held_by(&self, uid: u32) -> usize {
        self.shares.held_by(uid)
    }

    fn count_refusal(&self, refusal: Refusal) {
        let counter = match refusal {
            Refusal::Share(shares::Refusal::PerUser { .. }) => &self.counters.refused_per_user,
            Refusal::Share(shares::Refusal::NonRoot { .. }) => &self.counters.refused_non_root,
            Refusal::Share(shares::Refusal::Total { .. }) | Refusal::NoCredentials => {
                &self.counters.refused_total
            }
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// A connection's place in its user's share; given back when dropped (the connection closed).
#[derive(Debug)]
pub struct Slot {
    connections: Arc<Connections>,
    share: Share,
}

impl Slot {
    fn uid(&self) -> u32 {
        self.share.uid()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.counters.closed.fetch_add(1, Relaxed);
    }
}

/// Accepts connections on `listener` until `accepting` turns false, and yields those that
/// were admitted and sent the HTTP/2 preface in time, ready for the gRPC server.
pub fn accept(
    listener: UnixListener,
    connections: Arc<Connections>,
    mut accepting: watch::Receiver<bool>,
) -> impl Stream<Item = io::Result<FixedAuthority>> {
    // Handshakes finish in any order; the server takes them as they come.
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(10);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = accepting.wait_for(|on| !on) => break,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    connections.counters.accept_errors.fetch_add(1, Relaxed);
                    // Out of descriptors (EMFILE, ENFILE) or memory: accept fails at once
                    // until something closes, so retrying at once would spin. Connections
                    // already waiting stay in the listen backlog meanwhile.
                    tracing::warn!("accept failed, pausing {backoff:?}: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                    continue;
                }
            };
            backoff = Duration::from_millis(10);
            connections.counters.accepted.fetch_add(1, Relaxed);
            let uid = stream.peer_cred().ok().map(|c| c.uid());
            match connections.admit(uid) {
                Ok(slot) => {
                    let handshake = connections.limits.handshake;
                    tokio::spawn(greet(stream, slot, handshake, tx.clone()));
                }
                Err(refusal) => {
                    connections.count_refusal(refusal);
                    tracing::debug!("connection refused: {refusal}");
                    refuse(&stream, &refusal.to_string());
                }
            }
        }
        drop(listener);
        tracing::debug!("no longer accepting connections");
        // The end of this stream would make the server close every connection at once: keep
        // it open until the server lets go of it, so that clients finish what they do.
        tx.closed().await;
    });
    ReceiverStream::new(rx)
}

/// Waits for the client's HTTP/2 preface, then hands the connection to the server.
async fn greet(
    mut stream: UnixStream,
    slot: Slot,
    deadline: Duration,
    server: mpsc::Sender<io::Result<FixedAuthority>>,
) {
    let mut preface = [0; PREFACE.len()];
    match tokio::time::timeout(deadline, stream.read_exact(&mut preface)).await {
        Err(_) => {
            slot.connections
                .counters
                .handshake_timeouts
                .fetch_add(1, Relaxed);
            tracing::debug!(
                uid = slot.uid(),
                "a connection sent nothing in {deadline:?}"
            );
        }
        // The client went away first: nothing to serve.
        Ok(Err(_)) => {}
        Ok(Ok(_)) if &preface != PREFACE => {
            slot.connections.counters.bad_prefaces.fetch_add(1, Relaxed);
            refuse(
                &stream,
                "vmscoped speaks gRPC (HTTP/2) only: this was not an HTTP/2 preface",
            );
        }
        Ok(Ok(_)) => {
            let _ = server
                .send(Ok(FixedAuthority::after_preface(stream, slot)))
                .await;
        }
    }
}

/// Tells a refused client why, as HTTP/2 does (a SETTINGS frame, then GOAWAY with
/// ENHANCE_YOUR_CALM and the reason as debug data), without waiting: a client that does not
/// read it loses only the explanation.
fn refuse(stream: &UnixStream, why: &str) {
    let _ = stream.try_write(&goaway(why));
    // A Unix socket closed with unread bytes resets its peer, which then never reads the
    // explanation: read what the client sent already (a preface, a first request), boundedly.
    let mut sink = [0; 4096];
    for _ in 0..16 {
        if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// The server preface and a GOAWAY frame carrying `why`.
pub fn goaway(why: &str) -> Vec<u8> {
    const SETTINGS: u8 = 0x4;
    const GOAWAY: u8 = 0x7;
    const ENHANCE_YOUR_CALM: u32 = 0xb;
    let why = &why.as_bytes()[..why.len().min(1 << 12)];
    let mut frames = vec![0, 0, 0, SETTINGS, 0, 0, 0, 0, 0];
    let len = (8 + why.len()) as u32;
    frames.extend_from_slice(&len.to_be_bytes()[1..]);
    frames.extend_from_slice(&[GOAWAY, 0, 0, 0, 0, 0]);
    // Last stream id 0: no request was processed.
    frames.extend_from_slice(&0u32.to_be_bytes());
    frames.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    frames.extend_from_slice(why);
    frames
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            per_user: 2,
            non_root: 3,
            total: 5,
            handshake: Duration::from_millis(100),
            streams_per_connection: 4,
        }
    }

    #[test]
    fn connections_hold_shares_until_closed() {
        let connections = Connections::new(limits());
        let a: Vec<_> = (0..2)
            .map(|_| connections.admit(Some(1000)).unwrap())
            .collect();
        let refused = connections.admit(Some(1000)).unwrap_err();
        assert!(refused.to_string().contains("--max-connections-per-user"));
        assert_eq!(connections.admit(None).unwrap_err(), Refusal::NoCredentials);
        drop(a);
        assert_eq!(connections.held_by(1000), 0);
        assert_eq!(connections.counters.closed.load(Relaxed), 2);
    }

    #[test]
    fn limits_fit_the_descriptor_limit() {
        let fitted = ConnectionLimits::default().fitted_to(1024);
        assert_eq!(fitted.total, 512);
        assert_eq!(fitted.non_root, 256);
        assert_eq!(ConnectionLimits::default().fitted_to(1 << 20).total, 4096);
    }

    #[test]
    fn goaway_is_a_well_formed_frame_after_settings() {
        let frames = goaway("why");
        assert_eq!(&frames[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let len = u32::from_be_bytes([0, frames[9], frames[10], frames[11]]) as usize;
        assert_eq!(frames[12], 7);
        assert_eq!(frames.len(), 18 + len);
        assert_eq!(&frames[18 + 4..22 + 4], &[0, 0, 0, 0xb]);
        assert_eq!(&frames[26..], b"why");
    }

    async fn listening() -> (tempfile::TempDir, std::path::PathBuf, UnixListener) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        (dir, path, listener)
    }

    #[tokio::test]
    async fn silent_and_foreign_clients_are_closed_and_speakers_served() {
        let (_dir, path, listener) = listening().await;
        let connections = Connections::new(limits());
        let (on, accepting) = watch::channel(true);
        let mut served = accept(listener, connections.clone(), accepting);

        let mut silent = UnixStream::connect(&path).await.unwrap();
        let mut foreign = UnixStream::connect(&path).await.unwrap();
        foreign
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut speaker = UnixStream::connect(&path).await.unwrap();
        speaker.write_all(PREFACE).await.unwrap();

        let first = tokio_stream::StreamExt::next(&mut served).await.unwrap();
        assert!(first.is_ok());
        // The silent one is closed at its deadline: it reads the end of the stream.
        let mut rest = Vec::new();
        silent.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        foreign.read_to_end(&mut rest).await.unwrap();
        assert!(rest.ends_with(b"this was not an HTTP/2 preface"));
        let c = &connections.counters;
        assert_eq!(c.handshake_timeouts.load(Relaxed), 1);
        assert_eq!(c.bad_prefaces.load(Relaxed), 1);
        assert_eq!(connections.held_by(crate::sys::effective_uid()), 1);
        drop(first);
        assert_eq!(connections.held_by(crate::sys::effective_uid()), 0);

        on.send(false).unwrap();
        // No longer accepting, but the stream stays open while the server holds it.
        while UnixStream::connect(&path).await.is_ok() {
            tokio::task::yield_now().await;
        }
        let pending = tokio_stream::StreamExt::next(&mut served);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), pending)
                .await
                .is_err()
        );
    }
}
