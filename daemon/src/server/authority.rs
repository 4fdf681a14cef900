//! The daemon's end of each client connection: what the client sends passes through
//! [`AuthorityRewriter`] before h2 reads it, so that h2 accepts the `:authority` gRPC C-core
//! clients send over a Unix socket (the socket path, percent-encoded; see
//! [`vmscope_parse::h2_authority`]). What the daemon sends goes out untouched, and the peer
//! credentials the handlers authorise with are the socket's.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::UnixStream,
};
use tonic::transport::server::{Connected, UdsConnectInfo};
use vmscope_parse::h2_authority::AuthorityRewriter;

use super::connections::{PREFACE, Slot};

/// Bytes read from the socket at a time: on the stack of the read, so that an idle connection
/// holds no buffer of ours.
const READ_CHUNK: usize = 16 << 10;

/// A client connection whose incoming `:authority` fields h2 accepts.
#[derive(Debug)]
pub struct FixedAuthority {
    inner: UnixStream,
    rewriter: AuthorityRewriter,
    /// The connection's place in its user's share, given back when h2 drops the connection.
    _slot: Option<Slot>,
    /// Rewritten bytes not yet read by h2, from `out_at` on.
    out: Vec<u8>,
    out_at: usize,
    eof: bool,
    /// What was logged about this connection: a rewrite, a fallback.
    logged: (bool, bool),
}

impl FixedAuthority {
    /// Wraps a connection from its first byte.
    pub fn new(inner: UnixStream) -> Self {
        FixedAuthority {
            inner,
            rewriter: AuthorityRewriter::new(),
            _slot: None,
            out: Vec::new(),
            out_at: 0,
            eof: false,
            logged: (false, false),
        }
    }

    /// Wraps a connection whose first bytes, the HTTP/2 preface, were read already; `slot` is
    /// held as long as the connection.
    pub fn after_preface(inner: UnixStream, slot: Slot) -> Self {
        let mut fixed = FixedAuthority::new(inner);
        fixed._slot = Some(slot);
        fixed.rewriter.feed(PREFACE, &mut fixed.out);
        fixed
    }

    fn log_once(&mut self) {
        if !self.logged.0 && self.rewriter.rewritten() > 0 {
            self.logged.0 = true;
            tracing::debug!("a client's :authority is replaced by one h2 accepts");
        }
        if !self.logged.1
            && let Some(reason) = self.rewriter.fallback()
        {
            self.logged.1 = true;
            tracing::debug!("a client's HTTP/2 stream goes to h2 as it is: {reason}");
        }
    }
}

impl AsyncRead for FixedAuthority {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        // Ready with nothing read means the end of the stream: read on until the rewriter gives
        // something out (it holds back header blocks) or the socket has nothing more for now.
        loop {
            if this.out_at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_at);
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out.clear();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            // Not zeroed: the socket writes what is read, and only that is looked at.
            let mut bytes = [std::mem::MaybeUninit::<u8>::uninit(); READ_CHUNK];
            let mut chunk = ReadBuf::uninit(&mut bytes);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk))?;
            if chunk.filled().is_empty() {
                this.rewriter.finish(&mut this.out);
                this.eof = true;
            } else {
                this.rewriter.feed(chunk.filled(), &mut this.out);
                this.log_once();
            }
        }
    }
}

impl AsyncWrite for FixedAuthority {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Connected for FixedAuthority {
    type ConnectInfo = UdsConnectInfo;

    /// The socket's: the handlers authorise each request from its peer credentials.
    fn connect_info(&self) -> UdsConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// What grpcio 1.85.1 sends for /grpc.health.v1.Health/Check on `unix:///tmp/nu/s`, up to
    /// the end of the request (the capture goes on with grpcio's cancel on its timeout).
    fn grpcio_request() -> Vec<u8> {
        let capture = include_bytes!("../../parse/testdata/grpcio-1.85.1-unix-client.h2");
        let mut end = 24;
        loop {
            let len = usize::from(capture[end + 1]) << 8 | usize::from(capture[end + 2]);
            let (frame_type, flags) = (capture[end + 3], capture[end + 4]);
            end += 9 + len;
            if frame_type == 0 && flags & 1 != 0 {
                return capture[..end].to_vec();
            }
        }
    }

    #[tokio::test]
    async fn peer_credentials_are_the_sockets() {
        let (client, server) = UnixStream::pair().unwrap();
        let fixed = FixedAuthority::new(server);
        let cred = fixed.connect_info().peer_cred.expect("peer credentials");
        assert_eq!(cred.uid(), crate::sys::effective_uid());
        assert_eq!(cred.pid(), Some(std::process::id() as i32));
        drop(client);
    }

    #[tokio::test]
    async fn reads_rewritten_bytes_in_small_reads_then_the_end() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let mut fixed = FixedAuthority::new(server);
        let request = grpcio_request();
        client.write_all(&request).await.unwrap();
        client.shutdown().await.unwrap();
        let mut read = Vec::new();
        let mut small = [0; 7];
        loop {
            let n = fixed.read(&mut small).await.unwrap();
            if n == 0 {
                break;
            }
            read.extend_from_slice(&small[..n]);
        }
        let mut expected = Vec::new();
        let mut rewriter = AuthorityRewriter::new();
        rewriter.feed(&request, &mut expected);
        assert_eq!(rewriter.rewritten(), 1);
        assert_eq!(read, expected);
        assert!(fixed.rewriter.fallback().is_none());
    }

    /// The daemon's server stack, on connections from the accept loop, answers grpcio's health
    /// check, which it resets (PROTOCOL_ERROR) on bare sockets.
    #[tokio::test]
    async fn tonic_answers_grpcio() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (_, health) = tonic_health::server::health_reporter();
        let connections = super::super::connections::Connections::new(Default::default());
        let (_accepting, on) = tokio::sync::watch::channel(true);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(super::super::connections::accept(listener, connections, on)),
        );

        let mut client = UnixStream::connect(&socket).await.unwrap();
        client.write_all(&grpcio_request()).await.unwrap();
        // The server's frames, until the response's message on stream 1, or a reset.
        let mut from_server = Vec::new();
        let mut at = 0;
        let message = loop {
            let mut chunk = [0; 4096];
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(10), client.read(&mut chunk));
            let n = read.await.expect("the server answers").unwrap();
            assert!(n > 0, "the server closed the connection");
            from_server.extend_from_slice(&chunk[..n]);
            let mut found = None;
            while let Some(head) = from_server.get(at..at + 9) {
                let len = usize::from(head[1]) << 8 | usize::from(head[2]);
                let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
                let (frame_type, end) = (head[3], at + 9 + len);
                let Some(payload) = from_server.get(at + 9..end) else {
                    break;
                };
                assert_ne!(frame_type, 0x3, "stream {stream} reset: {payload:?}");
                if frame_type == 0x0 && stream == 1 {
                    found = Some(payload.to_vec());
                }
                at = end;
            }
            if let Some(message) = found {
                break message;
            }
        };
        // gRPC framing (uncompressed, 2 bytes), then HealthCheckResponse { status: SERVING }.
        assert_eq!(message, [0, 0, 0, 0, 2, 0x08, 0x01]);
    }
}
