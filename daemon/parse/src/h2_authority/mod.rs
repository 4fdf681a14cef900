//! Makes the `:authority` of HTTP/2 requests acceptable to h2, on the bytes a client sends.
//!
//! Over a Unix socket, gRPC C-core clients (Python's grpcio, Ruby, C++, PHP; C-core 1.57 and
//! later) send the socket path, percent-encoded, as `:authority`: `tmp%2Fnu%2Fs` for
//! `unix:///tmp/nu/s`. h2's server parses `:authority` with `http::uri::Authority`, which
//! refuses a `%` outside the userinfo, and resets each such stream with PROTOCOL_ERROR: every
//! call fails. h2 has no option to relax that (hyperium/h2#487 is still open), so the daemon
//! rewrites the client's bytes before h2 reads them, with an [`AuthorityRewriter`] per
//! connection:
//!
//! - it checks the client preface, then splits frames; every frame but HEADERS and CONTINUATION
//!   passes through as it came, payloads copied as they arrive;
//! - it reads each header block with an HPACK reader that follows the client's dynamic table
//!   ([`hpack`]), and replaces an `:authority` value h2 refuses by one of the same length that
//!   it accepts (`tmp-2Fnu-2Fs`), so that the server's table stays the client's, entry for
//!   entry and byte for byte of size;
//! - a block that needed nothing goes out byte for byte; a rewritten one is framed anew;
//! - anything it does not understand (a bad preface, an HPACK error, a header block over
//!   [`MAX_HEADER_BLOCK`]...) turns the connection to passthrough, the original bytes forwarded
//!   from there on: h2 then judges them as it would have, so the rewriter never makes things
//!   worse. It holds at most one header block, and never panics.
//!
//! ```
//! use vmscope_parse::h2_authority::AuthorityRewriter;
//!
//! let mut rewriter = AuthorityRewriter::new();
//! let mut to_server = Vec::new();
//! // Feed the client's bytes as they arrive, in any pieces; forward what comes out.
//! rewriter.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", &mut to_server);
//! rewriter.finish(&mut to_server); // the client closed
//! assert_eq!(to_server, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
//! assert_eq!(rewriter.rewritten(), 0);
//! ```

pub mod hpack;
pub mod huffman;

use thiserror::Error;

pub use hpack::HpackError;

/// The client connection preface (RFC 9113, section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Largest header block held back (its frames, headers included); a larger one is forwarded
/// unread. h2 accepts header lists of 16 MiB, clients send a few hundred bytes.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Largest frame payload written for a rewritten block: the initial SETTINGS_MAX_FRAME_SIZE,
/// which every server accepts whatever it advertises.
pub const MAX_FRAME_PAYLOAD: usize = 16384;

const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Why a connection went to passthrough.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Fallback {
    /// The client did not start with the HTTP/2 preface.
    #[error("the client did not send the HTTP/2 connection preface")]
    Preface,
    /// A frame other than the CONTINUATION of the stream inside a header block, or a
    /// CONTINUATION outside one.
    #[error("a {frame_type:#x} frame on stream {stream_id} breaks a header block")]
    Interleaved {
        /// Its type.
        frame_type: u8,
        /// Its stream.
        stream_id: u32,
    },
    /// A PUSH_PROMISE, which only servers send.
    #[error("the client sent a PUSH_PROMISE")]
    PushPromise,
    /// A HEADERS frame whose padding and priority are longer than the frame.
    #[error("a HEADERS frame is shorter than its padding and priority")]
    Padding,
    /// A header block larger than [`MAX_HEADER_BLOCK`].
    #[error("a header block is larger than {MAX_HEADER_BLOCK} bytes")]
    BlockTooLarge,
    /// A header block the HPACK reader could not read. Its reason is in the message, so not a
    /// `source` (a chain printer would say it twice).
    #[error("cannot read a header block: {0}")]
    Hpack(HpackError),
}

impl From<HpackError> for Fallback {
    fn from(error: HpackError) -> Fallback {
        Fallback::Hpack(error)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Matching the preface; how many of its bytes came.
    Preface(usize),
    /// Reading a frame header into `head`.
    Head,
    /// Inside a frame's payload: how much of it is still to come, and whether it is part of a
    /// header block (held back) or not (forwarded).
    Payload { remaining: usize, held: bool },
    /// Forwarding everything as it comes.
    Passthrough,
}

/// The header block being gathered.
#[derive(Debug, Default)]
struct Block {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    /// The block's fragments, put together.
    fragment: Vec<u8>,
}

/// The rewriter of one connection's client-to-server bytes; see the [module](self).
#[derive(Debug)]
pub struct AuthorityRewriter {
    state: State,
    head: [u8; FRAME_HEADER_LEN],
    head_len: usize,
    /// The original bytes (frame headers and payloads) of the header block being gathered.
    held: Vec<u8>,
    /// Where the current frame's payload starts in `held`.
    payload_start: usize,
    /// The current frame's type and flags.
    frame: (u8, u8),
    block: Option<Block>,
    hpack: hpack::BlockRewriter,
    rewritten: usize,
    fallback: Option<Fallback>,
}

impl Default for AuthorityRewriter {
    fn default() -> Self {
        AuthorityRewriter::new()
    }
}

impl AuthorityRewriter {
    /// A rewriter for a new connection, expecting the client preface.
    pub fn new() -> Self {
        AuthorityRewriter {
            state: State::Preface(0),
            head: [0; FRAME_HEADER_LEN],
            head_len: 0,
            held: Vec::new(),
            payload_start: 0,
            frame: (0, 0),
            block: None,
            hpack: hpack::BlockRewriter::default(),
            rewritten: 0,
            fallback: None,
        }
    }

    /// How many `:authority` fields were replaced or dropped so far. While it is 0, what came
    /// out is what went in.
    pub fn rewritten(&self) -> usize {
        self.rewritten
    }

    /// Why the connection went to passthrough, if it did.
    pub fn fallback(&self) -> Option<&Fallback> {
        self.fallback.as_ref()
    }

    /// Bytes held back: a frame header or a header block not yet complete.
    pub fn held(&self) -> usize {
        self.held.len() + self.head_len
    }

    /// Reads the next bytes from the client and appends to `out` what the server may read now.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            match self.state {
                State::Passthrough => {
                    out.extend_from_slice(input);
                    return;
                }
                State::Preface(matched) => {
                    let n = input.len().min(PREFACE.len() - matched);
                    if input[..n] != PREFACE[matched..matched + n] {
                        self.fall_back(Fallback::Preface, out);
                        continue;
                    }
                    // Bytes that match go on at once: h2 waits for the whole preface.
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if matched + n == PREFACE.len() {
                        State::Head
                    } else {
                        State::Preface(matched + n)
                    };
                }
                State::Head => {
                    let n = input.len().min(FRAME_HEADER_LEN - self.head_len);
                    self.head[self.head_len..self.head_len + n].copy_from_slice(&input[..n]);
                    self.head_len += n;
                    input = &input[n..];
                    if self.head_len == FRAME_HEADER_LEN {
                        self.frame_head(out);
                    }
                }
                State::Payload { remaining, held } => {
                    let n = input.len().min(remaining);
                    if held {
                        self.held.extend_from_slice(&input[..n]);
                    } else {
                        out.extend_from_slice(&input[..n]);
                    }
                    input = &input[n..];
                    self.state = State::Payload {
                        remaining: remaining - n,
                        held,
                    };
                    if held && self.held.len() > MAX_HEADER_BLOCK {
                        self.fall_back(Fallback::BlockTooLarge, out);
                    } else if remaining == n {
                        self.state = State::Head;
                        if held {
                            self.frame_end(out);
                        }
                    }
                }
            }
        }
    }

    /// The client closed: appends what is still held back, unchanged (h2 will see a
    /// connection cut inside a frame, as it would have).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
        out.extend_from_slice(&self.head[..self.head_len]);
        self.head_len = 0;
        self.block = None;
    }

    /// Forwards what is held back, and everything from now on, unchanged.
    fn fall_back(&mut self, reason: Fallback, out: &mut Vec<u8>) {
        self.finish(out);
        self.held = Vec::new();
        self.state = State::Passthrough;
        self.fallback = Some(reason);
    }

    /// A whole frame header is in `head`.
    fn frame_head(&mut self, out: &mut Vec<u8>) {
        let head = self.head;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (frame_type, flags) = (head[3], head[4]);
        let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let in_block = self.block.as_ref().map(|b| b.stream_id);
        let held = match (frame_type, in_block) {
            (CONTINUATION, Some(id)) if id == stream_id => true,
            (HEADERS, None) => {
                self.block = Some(Block {
                    stream_id,
                    ..Block::default()
                });
                true
            }
            (PUSH_PROMISE, _) => return self.fall_back(Fallback::PushPromise, out),
            (CONTINUATION, _) | (_, Some(_)) => {
                return self.fall_back(
                    Fallback::Interleaved {
                        frame_type,
                        stream_id,
                    },
                    out,
                );
            }
            (_, None) => false,
        };
        if held {
            // Counted here too: empty CONTINUATION frames grow a block by their headers alone.
            if self.held.len() + FRAME_HEADER_LEN > MAX_HEADER_BLOCK {
                return self.fall_back(Fallback::BlockTooLarge, out);
            }
            self.held.extend_from_slice(&head);
            self.payload_start = self.held.len();
            self.frame = (frame_type, flags);
        } else {
            out.extend_from_slice(&head);
        }
        self.head_len = 0;
        self.state = State::Payload {
            remaining: len,
            held,
        };
        if len == 0 {
            self.state = State::Head;
            if held {
                self.frame_end(out);
            }
        }
    }

    /// A HEADERS or CONTINUATION frame is whole in `held`.
    fn frame_end(&mut self, out: &mut Vec<u8>) {
        let (frame_type, flags) = self.frame;
        let Some(block) = self.block.as_mut() else {
            return;
        };
        let mut payload = &self.held[self.payload_start..];
        if frame_type == HEADERS {
            block.end_stream = flags & END_STREAM != 0;
            let mut pad = 0;
            if flags & PADDED != 0 {
                let Some((&len, rest)) = payload.split_first() else {
                    return self.fall_back(Fallback::Padding, out);
                };
                pad = usize::from(len);
                payload = rest;
            }
            if flags & PRIORITY != 0 {
                let Some((priority, rest)) = payload.split_first_chunk::<5>() else {
                    return self.fall_back(Fallback::Padding, out);
                };
                block.priority = Some(*priority);
                payload = rest;
            }
            let Some(len) = payload.len().checked_sub(pad) else {
                return self.fall_back(Fallback::Padding, out);
            };
            payload = &payload[..len];
        }
        block.fragment.extend_from_slice(payload);
        if flags & END_HEADERS == 0 {
            return;
        }
        let Some(block) = self.block.take() else {
            return;
        };
        match self.hpack.rewrite(&block.fragment) {
            Ok(None) => out.append(&mut self.held),
            Ok(Some(rewritten)) => {
                self.rewritten += rewritten.fields;
                self.held.clear();
                write_block(out, &block, &rewritten.block);
            }
            Err(e) => self.fall_back(e.into(), out),
        }
    }
}

fn put_frame_head(out: &mut Vec<u8>, len: usize, frame_type: u8, flags: u8, stream_id: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[frame_type, flags]);
    out.extend_from_slice(&stream_id.to_be_bytes());
}

/// Frames a rewritten header block: a HEADERS frame with the original's END_STREAM and
/// priority, without padding, then CONTINUATION frames, none over [`MAX_FRAME_PAYLOAD`].
fn write_block(out: &mut Vec<u8>, block: &Block, fragment: &[u8]) {
    let priority = block.priority.as_ref().map_or(&[][..], |p| &p[..]);
    let first = fragment.len().min(MAX_FRAME_PAYLOAD - priority.len());
    let (first, mut rest) = fragment.split_at(first);
    let mut flags = if rest.is_empty() { END_HEADERS } else { 0 };
    if block.end_stream {
        flags |= END_STREAM;
    }
    if block.priority.is_some() {
        flags |= PRIORITY;
    }
    put_frame_head(
        out,
        priority.len() + first.len(),
        HEADERS,
        flags,
        block.stream_id,
    );
    out.extend_from_slice(priority);
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(rest.len().min(MAX_FRAME_PAYLOAD));
        let flags = if after.is_empty() { END_HEADERS } else { 0 };
        put_frame_head(out, chunk.len(), CONTINUATION, flags, block.stream_id);
        out.extend_from_slice(chunk);
        rest = after;
    }
}

#[cfg(test)]
mod tests;
