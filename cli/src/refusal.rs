//! The daemon's refusal of a connection, read off the connection itself.
//!
//! vmscoped refuses a connection beyond its user's share (or its total) as it accepts it: it
//! writes an HTTP/2 SETTINGS frame and a GOAWAY (ENHANCE_YOUR_CALM) whose debug data says why,
//! then closes. What the gRPC stack makes of that is a race: when the close comes before hyper
//! wrote its preface, the write fails with a broken pipe and the GOAWAY is never read; else
//! the request fails with "transport error", or with an h2 error whose status drops the debug
//! data. None of them carries the reason. So each connection's IO ([`Watched`]) keeps the first
//! bytes the daemon sends, and on a failed read or write reads what is waiting, and a GOAWAY
//! with ENHANCE_YOUR_CALM among them is kept for the process ([`seen`]): whatever failure the
//! connection then shows is told as that refusal.

use std::{
    io,
    os::fd::AsRawFd as _,
    pin::Pin,
    sync::OnceLock,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::UnixStream,
};

/// The first refusal any connection of this process read. One per process: a vmscope run
/// talks to one daemon, and once it refused a connection, that is why what follows failed.
static REFUSAL: OnceLock<String> = OnceLock::new();

/// Bytes of a connection's start that are looked at: a refusal comes first, and its reason is
/// at most 4 KiB (the daemon's bound) after two frame headers and the GOAWAY's 8 fixed bytes.
const WATCHED_BYTES: usize = 8192;

/// Why the daemon refused a connection of this process, if it did.
pub fn seen() -> Option<&'static str> {
    REFUSAL.get().map(String::as_str)
}

/// A connection to the daemon whose first bytes are looked at for a refusal.
#[derive(Debug)]
pub struct Watched {
    stream: UnixStream,
    /// The daemon's first bytes, up to [`WATCHED_BYTES`].
    start: Vec<u8>,
}

impl Watched {
    /// Watches `stream`, a connection just made.
    pub fn new(stream: UnixStream) -> Watched {
        Watched {
            stream,
            start: Vec::new(),
        }
    }

    fn saw(&mut self, bytes: &[u8]) {
        let room = WATCHED_BYTES - self.start.len();
        if room == 0 || bytes.is_empty() {
            return;
        }
        self.start
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
        if let Some(why) = goaway_reason(&self.start) {
            let _ = REFUSAL.set(why);
        }
    }

    /// After a failed read or write: the daemon may have closed after saying why, and what it
    /// said is still waiting in the socket. Never blocks.
    fn read_what_waits(&mut self) {
        let mut buf = [0u8; WATCHED_BYTES];
        let room = WATCHED_BYTES - self.start.len();
        if room == 0 {
            return;
        }
        // SAFETY: recv writes at most `room` bytes into `buf`, which holds more; the
        // descriptor is this connection's, alive while `self.stream` is.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                room,
                libc::MSG_DONTWAIT,
            )
        };
        if let Ok(n) = usize::try_from(n) {
            self.saw(&buf[..n]);
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        match &read {
            Poll::Ready(Ok(())) => this.saw(&buf.filled()[before..]),
            Poll::Ready(Err(_)) => this.read_what_waits(),
            Poll::Pending => {}
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Err(_))) {
            this.read_what_waits();
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Err(_))) {
            this.read_what_waits();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// HTTP/2 frame type GOAWAY (RFC 9113, 6.8).
const GOAWAY: u8 = 0x7;
/// HTTP/2 error code ENHANCE_YOUR_CALM (RFC 9113, 7): what vmscoped refuses with.
const ENHANCE_YOUR_CALM: u32 = 0xb;
/// Longest reason kept, in characters.
const MAX_REASON_CHARS: usize = 1024;

/// The debug data of a GOAWAY with ENHANCE_YOUR_CALM among the whole frames at the start of
/// `bytes` (what a server sends first), as printable text.
pub fn goaway_reason(bytes: &[u8]) -> Option<String> {
    let mut at = 0;
    // Each frame: length (24 bits), type, flags, stream id (32 bits), payload (RFC 9113, 4.1).
    while let Some(header) = bytes.get(at..at + 9) {
        let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let payload = bytes.get(at + 9..at + 9 + len)?;
        at += 9 + len;
        // GOAWAY: last stream id (32 bits), error code (32 bits), debug data.
        if header[3] != GOAWAY || len < 8 {
            continue;
        }
        let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        if code != ENHANCE_YOUR_CALM {
            continue;
        }
        let why: String = String::from_utf8_lossy(&payload[8..])
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_REASON_CHARS)
            .collect();
        let why = why.trim();
        return Some(if why.is_empty() {
            "it is overloaded (HTTP/2 ENHANCE_YOUR_CALM, no reason given)".to_owned()
        } else {
            why.to_owned()
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as RFC 9113 lays it out.
    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut frame = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 0];
        frame.extend_from_slice(payload);
        frame
    }

    fn goaway(code: u32, why: &[u8]) -> Vec<u8> {
        let mut payload = 0u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&code.to_be_bytes());
        payload.extend_from_slice(why);
        frame(GOAWAY, &payload)
    }

    const SETTINGS: u8 = 0x4;

    #[test]
    fn a_refusal_after_the_servers_settings_is_read_with_its_reason() {
        let why = b"connections to vmscoped: uid 65534 holds 2, the most one user may";
        let mut bytes = frame(SETTINGS, &[]);
        bytes.extend(goaway(ENHANCE_YOUR_CALM, why));
        assert_eq!(
            goaway_reason(&bytes).as_deref(),
            Some(std::str::from_utf8(why).unwrap())
        );
        // A normal server's settings (with values), then the refusal.
        let mut bytes = frame(SETTINGS, &[0, 3, 0, 0, 0, 64]);
        bytes.extend(goaway(ENHANCE_YOUR_CALM, b""));
        assert!(goaway_reason(&bytes).unwrap().contains("no reason given"));
    }

    #[test]
    fn other_frames_and_broken_bytes_are_no_refusal() {
        // A graceful GOAWAY (NO_ERROR) is the daemon going away, not a refusal.
        assert_eq!(goaway_reason(&goaway(0, b"bye")), None);
        let whole = [frame(SETTINGS, &[]), goaway(ENHANCE_YOUR_CALM, b"why")].concat();
        // Cut anywhere before the GOAWAY's end: not (yet) a refusal.
        for cut in 0..whole.len() {
            assert_eq!(goaway_reason(&whole[..cut]), None, "cut at {cut}");
        }
        // A GOAWAY too short to hold an error code, and a length past the bytes.
        assert_eq!(goaway_reason(&frame(GOAWAY, &[0, 0, 0, 0, 0, 0, 0])), None);
        assert_eq!(
            goaway_reason(&[0xff, 0xff, 0xff, GOAWAY, 0, 0, 0, 0, 0]),
            None
        );
        // Control characters in the reason cannot drive the user's terminal.
        assert_eq!(
            goaway_reason(&goaway(ENHANCE_YOUR_CALM, b"full\x1b[2J\n")).as_deref(),
            Some("full [2J")
        );
    }

    #[tokio::test]
    async fn a_refusal_waiting_after_a_failed_write_is_read() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let refusal = [frame(SETTINGS, &[]), goaway(ENHANCE_YOUR_CALM, b"go away")].concat();
        theirs.try_write(&refusal).unwrap();
        drop(theirs);
        let mut watched = Watched::new(ours);
        // Writes fail once the peer is gone (EPIPE); nothing was read before.
        let failed = tokio::io::AsyncWriteExt::write_all(&mut watched, b"PRI * HTTP/2.0").await;
        assert!(failed.is_err());
        assert_eq!(seen(), Some("go away"));
    }
}
