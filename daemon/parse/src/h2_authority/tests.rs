//! The rewriter against hand-built connections and the bytes grpcio really sends, each output
//! checked by h2's own server: what we produce must be what h2 accepts.

use std::time::Duration;

use super::{hpack::put_integer, *};

/// What grpcio 1.85.1 (PyPI) sent on `unix:///tmp/nu/s` for two calls of
/// /grpc.health.v1.Health/Check: preface, SETTINGS, WINDOW_UPDATE, then HEADERS with
/// `:path`, `:authority: tmp%2Fnu%2Fs` (literal name, incremental indexing), `:method`,
/// `:scheme`..., DATA; the second call's HEADERS names `:authority` by its dynamic index.
/// Captured with a Python socket server that answered with an empty SETTINGS frame.
const GRPCIO: &[u8] = include_bytes!("../../testdata/grpcio-1.85.1-unix-client.h2");

fn frame(frame_type: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_frame_head(&mut out, payload.len(), frame_type, flags, stream_id);
    out.extend_from_slice(payload);
    out
}

/// The preface and an empty SETTINGS frame: what h2 wants before anything else.
fn start() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out
}

fn headers(stream_id: u32, block: &[u8]) -> Vec<u8> {
    frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ix {
    Incremental,
    Without,
    Never,
}

#[derive(Debug, Clone, Copy)]
enum Name<'a> {
    Index(usize),
    Raw(&'a str),
    Huffman(&'a str),
}

/// An HPACK string literal.
fn string(out: &mut Vec<u8>, value: &[u8], huffman: bool) {
    if huffman {
        let coded = huffman::encode(value);
        put_integer(out, 0x80, 7, coded.len());
        out.extend_from_slice(&coded);
    } else {
        put_integer(out, 0, 7, value.len());
        out.extend_from_slice(value);
    }
}

/// An HPACK literal field.
fn literal(ix: Ix, name: Name, value: &[u8], huffman: bool) -> Vec<u8> {
    let (pattern, bits) = match ix {
        Ix::Incremental => (0x40, 6),
        Ix::Without => (0x00, 4),
        Ix::Never => (0x10, 4),
    };
    let mut out = Vec::new();
    match name {
        Name::Index(index) => put_integer(&mut out, pattern, bits, index),
        Name::Raw(name) => {
            out.push(pattern);
            string(&mut out, name.as_bytes(), false);
        }
        Name::Huffman(name) => {
            out.push(pattern);
            string(&mut out, name.as_bytes(), true);
        }
    }
    string(&mut out, value, huffman);
    out
}

fn indexed(index: usize) -> Vec<u8> {
    let mut out = Vec::new();
    put_integer(&mut out, 0x80, 7, index);
    out
}

/// `:method: POST`, `:scheme: http` (static 3 and 6), which follow `:authority` in C-core's
/// blocks: a rewrite that moved or renamed the field would break the request.
const METHOD_SCHEME: [u8; 2] = [0x83, 0x86];

/// A request block as C-core lays it out: `:path`, then `authority`, then `:method`, `:scheme`.
fn request(path: &str, authority: &[u8]) -> Vec<u8> {
    let mut block = literal(Ix::Without, Name::Index(4), path.as_bytes(), false);
    block.extend_from_slice(authority);
    block.extend_from_slice(&METHOD_SCHEME);
    block
}

fn rewrite(input: &[u8]) -> (Vec<u8>, AuthorityRewriter) {
    let mut rewriter = AuthorityRewriter::new();
    let mut out = Vec::new();
    rewriter.feed(input, &mut out);
    rewriter.finish(&mut out);
    (out, rewriter)
}

/// A request as h2 hands it to the server.
#[derive(Debug)]
struct Accepted {
    path: String,
    authority: Option<String>,
    headers: http::HeaderMap,
    end_stream: bool,
}

/// What h2's server makes of a client's bytes: the requests it accepts, and the error codes of
/// the streams it resets.
fn h2_server(input: &[u8]) -> (Vec<Accepted>, Vec<u32>) {
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(8 << 20);
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let requests = accepted.clone();
        let serve = tokio::spawn(async move {
            let mut responders = Vec::new();
            if let Ok(mut connection) = h2::server::handshake(server).await {
                while let Some(Ok((request, respond))) = connection.accept().await {
                    let (parts, body) = request.into_parts();
                    requests.lock().unwrap().push(Accepted {
                        path: parts.uri.path().to_owned(),
                        authority: parts.uri.authority().map(|a| a.to_string()),
                        headers: parts.headers,
                        end_stream: body.is_end_stream(),
                    });
                    // Kept: a dropped responder resets its stream.
                    responders.push(respond);
                }
            }
            std::future::pending::<()>().await;
        });
        // h2 answers a PING once it has read all before it, and may send the resets that reading
        // caused after that answer, but before its answer to a second PING. The client end
        // stays open: h2 drops what it has not handed out when the connection ends.
        client.write_all(input).await.unwrap();
        client
            .write_all(&frame(0x6, 0, 0, b"ping one"))
            .await
            .unwrap();
        let mut from_server = Vec::new();
        let mut resets = Vec::new();
        let mut at = 0;
        let mut ping: &[u8; 8] = b"ping one";
        'read: loop {
            let mut chunk = [0; 4096];
            let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut chunk));
            match read.await.expect("h2 answers the PING").unwrap() {
                0 => break,
                n => from_server.extend_from_slice(&chunk[..n]),
            }
            while let Some(head) = from_server.get(at..at + FRAME_HEADER_LEN) {
                let len =
                    usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
                let (frame_type, flags) = (head[3], head[4]);
                let Some(payload) =
                    from_server.get(at + FRAME_HEADER_LEN..at + FRAME_HEADER_LEN + len)
                else {
                    break;
                };
                match frame_type {
                    0x3 => resets.push(u32::from_be_bytes(payload.try_into().unwrap())),
                    0x6 if flags & 0x1 != 0 && payload == ping => {
                        if ping == b"ping two" {
                            break 'read;
                        }
                        ping = b"ping two";
                        client.write_all(&frame(0x6, 0, 0, ping)).await.unwrap();
                    }
                    _ => {}
                }
                at += FRAME_HEADER_LEN + len;
            }
        }
        // The server task hands out the streams it read, without waiting, once it runs.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        serve.abort();
        let requests = std::mem::take(&mut *accepted.lock().unwrap());
        (requests, resets)
    })
}

/// PROTOCOL_ERROR, h2's answer to a refused `:authority`.
const PROTOCOL_ERROR: u32 = 1;

#[test]
fn grpcio_authority_is_replaced_in_place_and_its_index_stays_valid() {
    let (out, rewriter) = rewrite(GRPCIO);
    assert_eq!(rewriter.rewritten(), 1);
    assert_eq!(rewriter.fallback(), None);

    // The field `40 0a ":authority" 0c "tmp%2Fnu%2Fs"` becomes `41 0c "tmp-2Fnu-2Fs"`, the
    // frame 11 bytes shorter; all else, the second call's block included, is as it came.
    let field = [&[0x40, 0x0a][..], b":authority", &[0x0c], b"tmp%2Fnu%2Fs"].concat();
    let at = GRPCIO
        .windows(field.len())
        .position(|w| w == field)
        .unwrap();
    let frame_head = [0, 0, 234, HEADERS, END_HEADERS, 0, 0, 0, 1];
    let head = GRPCIO.windows(9).position(|w| w == frame_head).unwrap();
    assert!(head < at);
    let mut expected = GRPCIO[..head].to_vec();
    expected.extend_from_slice(&[0, 0, 223]);
    expected.extend_from_slice(&GRPCIO[head + 3..at]);
    expected.extend_from_slice(&[0x41, 0x0c]);
    expected.extend_from_slice(b"tmp-2Fnu-2Fs");
    expected.extend_from_slice(&GRPCIO[at + field.len()..]);
    assert_eq!(out, expected);

    // Unchanged, h2 refuses both calls (its resets cross grpcio's own, sent on its timeout);
    // rewritten, it takes both.
    let (requests, _) = h2_server(GRPCIO);
    assert!(requests.is_empty(), "{requests:?}");
    let (requests, resets) = h2_server(&out);
    assert!(!resets.contains(&PROTOCOL_ERROR), "{resets:?}");
    assert_eq!(requests.len(), 2, "{requests:?}");
    for request in &requests {
        assert_eq!(request.path, "/grpc.health.v1.Health/Check");
        assert_eq!(request.authority.as_deref(), Some("tmp-2Fnu-2Fs"));
        assert_eq!(request.headers["content-type"], "application/grpc");
        assert_eq!(request.headers["te"], "trailers");
        assert!(
            request.headers["user-agent"]
                .to_str()
                .unwrap()
                .starts_with("grpc-python/1.85.1")
        );
    }
}

#[test]
fn refused_authorities_are_replaced_however_they_are_encoded() {
    let values: [&[u8]; 6] = [
        b"tmp%2Fnu%2Fs",
        b"/run/vmscope/vmscoped.sock",
        b"a b",
        b"host:1:2",
        b"\xff\xfe",
        b"%",
    ];
    // Name by static index, as a raw or Huffman literal, or by a dynamic index (the entry the
    // first request inserts).
    let names = [
        Name::Index(1),
        Name::Raw(":authority"),
        Name::Huffman(":authority"),
        Name::Index(62),
    ];
    for value in values {
        for ix in [Ix::Incremental, Ix::Without, Ix::Never] {
            for name in names {
                for huffman in [false, true] {
                    let case = format!("{value:?} {ix:?} {name:?} huffman {huffman}");
                    let mut input = start();
                    // Inserts `:authority: localhost`, which h2 takes as it is.
                    input.extend(headers(
                        1,
                        &request(
                            "/first",
                            &literal(Ix::Incremental, Name::Index(1), b"localhost", false),
                        ),
                    ));
                    input.extend(headers(
                        3,
                        &request("/second", &literal(ix, name, value, huffman)),
                    ));
                    // Names the second request's entry when it made one, else the first's.
                    let again = headers(5, &request("/third", &indexed(62)));
                    input.extend_from_slice(&again);

                    let (out, rewriter) = rewrite(&input);
                    assert_eq!(rewriter.rewritten(), 1, "{case}");
                    assert_eq!(rewriter.fallback(), None, "{case}");
                    assert!(out.ends_with(&again), "{case}: the third block was changed");
                    let (requests, resets) = h2_server(&out);
                    assert!(resets.is_empty(), "{case}: {resets:?}");
                    let got: Vec<_> = requests
                        .iter()
                        .map(|r| (r.path.as_str(), r.authority.clone().unwrap_or_default()))
                        .collect();
                    let replaced = String::from_utf8(hpack::replacement(value)).unwrap();
                    let third = if ix == Ix::Incremental {
                        &replaced
                    } else {
                        "localhost"
                    };
                    assert_eq!(
                        got,
                        [
                            ("/first", "localhost".to_owned()),
                            ("/second", replaced.clone()),
                            ("/third", third.to_owned()),
                        ],
                        "{case}"
                    );
                }
            }
        }
    }
}

#[test]
fn accepted_authorities_and_blocks_without_one_pass_byte_for_byte() {
    let mut input = start();
    let mut stream = 1;
    for value in [
        "localhost",
        "localhost:50051",
        "[::1]:80",
        "u%40x@host",
        "xn--bcher-kva.ch",
    ] {
        for ix in [Ix::Incremental, Ix::Without, Ix::Never] {
            for huffman in [false, true] {
                let field = literal(ix, Name::Raw(":authority"), value.as_bytes(), huffman);
                input.extend(headers(stream, &request("/p", &field)));
                stream += 2;
            }
        }
    }
    // No authority at all, and a padded HEADERS frame.
    input.extend(headers(stream, &request("/none", &[])));
    let mut padded = vec![4];
    padded.extend(request("/padded", &[]));
    padded.extend([0; 4]);
    input.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM | PADDED,
        stream + 2,
        &padded,
    ));

    let (out, rewriter) = rewrite(&input);
    assert_eq!(rewriter.rewritten(), 0);
    assert_eq!(rewriter.fallback(), None);
    assert_eq!(out, input);
    let (requests, resets) = h2_server(&out);
    assert!(resets.is_empty(), "{resets:?}");
    assert_eq!(requests.len(), 32);
}

#[test]
fn empty_authorities_are_dropped_where_they_can_be() {
    let mut input = start();
    // The static `:authority`, whose value is empty.
    input.extend(headers(1, &request("/static", &indexed(1))));
    // Empty literals that the table does not keep.
    for (stream, ix) in [(3, Ix::Without), (5, Ix::Never)] {
        input.extend(headers(
            stream,
            &request("/literal", &literal(ix, Name::Index(1), b"", false)),
        ));
    }
    let (out, rewriter) = rewrite(&input);
    assert_eq!(rewriter.rewritten(), 3);
    let (requests, resets) = h2_server(&out);
    assert!(resets.is_empty(), "{resets:?}");
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(requests.iter().all(|r| r.authority.is_none()));

    // Inserted into the table, an empty one has no replacement of its size: h2 refuses that
    // request as before, and the next, which names it, goes without.
    let mut input = start();
    let inserted = headers(
        1,
        &request(
            "/inserted",
            &literal(Ix::Incremental, Name::Raw(":authority"), b"", false),
        ),
    );
    input.extend_from_slice(&inserted);
    input.extend(headers(3, &request("/named", &indexed(62))));
    let (out, rewriter) = rewrite(&input);
    assert_eq!(rewriter.rewritten(), 1);
    let mut expected = start();
    expected.extend(inserted);
    expected.extend(headers(3, &request("/named", &[])));
    assert_eq!(out, expected);
    let (requests, resets) = h2_server(&out);
    assert_eq!(resets, [PROTOCOL_ERROR]);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/named");
}

#[test]
fn the_table_evicts_as_the_servers_does() {
    let mut input = start();
    // An 88-byte table: `:authority: tmp%2Fa` (10 + 7 + 32 bytes), then `:path: /a` (39) fill
    // it.
    let mut block = Vec::new();
    put_integer(&mut block, 0x20, 5, 88);
    block.extend(literal(Ix::Incremental, Name::Index(1), b"tmp%2Fa", false));
    block.extend(literal(Ix::Incremental, Name::Index(4), b"/a", false));
    block.extend(METHOD_SCHEME);
    input.extend(headers(1, &block));
    // `:path: /a` by index, then `x-pad: 012345678901` (49 bytes) evicts the authority, and
    // the authority only: the table is full again.
    let mut block = indexed(62);
    block.extend(METHOD_SCHEME);
    block.extend(literal(
        Ix::Incremental,
        Name::Raw("x-pad"),
        b"012345678901",
        false,
    ));
    input.extend(headers(3, &block));
    // Index 63 is `:path` now: a value that is no authority must pass as it is.
    let mut block = literal(Ix::Without, Name::Index(63), b"/b", false);
    block.extend(METHOD_SCHEME);
    let last = headers(5, &block);
    input.extend_from_slice(&last);

    let (out, rewriter) = rewrite(&input);
    assert_eq!(rewriter.rewritten(), 1);
    assert_eq!(rewriter.fallback(), None);
    assert!(out.ends_with(&last));
    let (requests, resets) = h2_server(&out);
    assert!(resets.is_empty(), "{resets:?}");
    let paths: Vec<_> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/a", "/a", "/b"]);
    assert_eq!(requests[0].authority.as_deref(), Some("tmp-2Fa"));
    assert_eq!(requests[1].headers["x-pad"], "012345678901");

    // The authority is gone from the table: naming it is an error, for h2 as for us.
    input.extend(headers(7, &request("/gone", &indexed(64))));
    let (_, rewriter) = rewrite(&input);
    assert_eq!(
        rewriter.fallback(),
        Some(&HpackError::UnknownIndex(64).into())
    );
}

#[test]
fn rewritten_blocks_are_framed_anew_with_end_stream_and_priority() {
    let block = request(
        "/split",
        &literal(Ix::Incremental, Name::Raw(":authority"), b"tmp%2Fs", true),
    );
    let (a, rest) = block.split_at(3);
    let (b, c) = rest.split_at(7);
    let priority = [0, 0, 0, 0, 15];
    let mut first = vec![2];
    first.extend(priority);
    first.extend(a);
    first.extend([0, 0]);
    let mut input = start();
    input.extend(frame(HEADERS, END_STREAM | PADDED | PRIORITY, 1, &first));
    input.extend(frame(CONTINUATION, 0, 1, b));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, c));
    // A request body, on another frame, passes untouched.
    let data = frame(0x0, END_STREAM, 3, b"body");
    let mut open = request("/open", &[]);
    open.extend(literal(Ix::Without, Name::Raw("x-k"), b"v", true));
    input.extend(frame(HEADERS, END_HEADERS, 3, &open));
    input.extend_from_slice(&data);

    let (out, rewriter) = rewrite(&input);
    assert_eq!(rewriter.rewritten(), 1);
    let (new_block, _) = {
        let mut hpack = hpack::BlockRewriter::default();
        let new = hpack.rewrite(&block).unwrap().unwrap();
        (new.block, new.fields)
    };
    let mut payload = priority.to_vec();
    payload.extend(&new_block);
    let mut expected = start();
    expected.extend(frame(
        HEADERS,
        END_STREAM | PRIORITY | END_HEADERS,
        1,
        &payload,
    ));
    expected.extend(frame(HEADERS, END_HEADERS, 3, &open));
    expected.extend(data);
    assert_eq!(out, expected);

    let (requests, resets) = h2_server(&out);
    assert!(resets.is_empty(), "{resets:?}");
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].authority.as_deref(), Some("tmp-2Fs"));
    assert!(requests[0].end_stream);
    assert!(!requests[1].end_stream);
    assert_eq!(requests[1].headers["x-k"], "v");
}

#[test]
fn large_rewritten_blocks_are_split_into_frames_h2_accepts() {
    let big = vec![b'v'; 40_000];
    let mut block = request(
        "/big",
        &literal(Ix::Never, Name::Raw(":authority"), b"a%2Fb", false),
    );
    block.extend(literal(Ix::Without, Name::Raw("x-big"), &big, false));
    let mut input = start();
    // The client's frames may be larger than 16384 bytes where the server allows it; the
    // rewritten ones never are.
    let (a, b) = block.split_at(16_000);
    input.extend(frame(HEADERS, 0, 1, a));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, b));

    let (out, rewriter) = rewrite(&input);
    assert_eq!(rewriter.rewritten(), 1);
    let mut rest = &out[start().len()..];
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let len = usize::from(rest[1]) << 8 | usize::from(rest[2]);
        frames.push((rest[3], rest[4], len));
        rest = &rest[9 + len..];
    }
    assert_eq!(
        frames,
        [
            (HEADERS, 0, 16384),
            (CONTINUATION, 0, 16384),
            (CONTINUATION, END_HEADERS, block.len() - 11 - 2 * 16384),
        ]
    );
    let (requests, resets) = h2_server(&out);
    assert!(resets.is_empty(), "{resets:?}");
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].authority.as_deref(), Some("a-2Fb"));
    assert_eq!(requests[0].headers["x-big"].len(), big.len());
}

#[test]
fn what_it_cannot_read_goes_through_unchanged_from_then_on() {
    let bad = |block: &[u8]| {
        let mut input = start();
        input.extend(headers(1, block));
        input
    };
    let invalid = request(
        "/late",
        &literal(Ix::Incremental, Name::Index(1), b"a%2Fb", false),
    );
    let mut huge_table = vec![];
    put_integer(&mut huge_table, 0x20, 5, hpack::MAX_TABLE_SIZE + 1);
    let mut too_large = start();
    too_large.extend(frame(HEADERS, 0, 1, &[0x82; 16384]));
    for _ in 0..64 {
        too_large.extend(frame(CONTINUATION, 0, 1, &[0x82; 16384]));
    }
    let mut empty_frames = start();
    empty_frames.extend(frame(HEADERS, 0, 1, &[]));
    for _ in 0..MAX_HEADER_BLOCK / 9 {
        empty_frames.extend(frame(CONTINUATION, 0, 1, &[]));
    }
    let cases: Vec<(&str, Vec<u8>, Fallback)> = vec![
        (
            "HTTP/1.1",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            Fallback::Preface,
        ),
        (
            "truncated field",
            bad(&[0x40, 0x05, b':', b'p']),
            HpackError::Truncated.into(),
        ),
        ("index 0", bad(&[0x80]), HpackError::ZeroIndex.into()),
        (
            "unknown index",
            bad(&indexed(70)),
            HpackError::UnknownIndex(70).into(),
        ),
        (
            "late size update",
            bad(&[0x82, 0x20]),
            HpackError::LateSizeUpdate.into(),
        ),
        (
            "huge table",
            bad(&huge_table),
            HpackError::TableTooLarge(65_537).into(),
        ),
        (
            "long integer",
            bad(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            HpackError::IntegerTooLong.into(),
        ),
        (
            "bad Huffman",
            bad(&[0x00, 0x81, 0x00, 0x01, b'v']),
            HpackError::Huffman(huffman::HuffmanError::Padding).into(),
        ),
        (
            "DATA inside a header block",
            [start(), frame(HEADERS, 0, 1, &[0x82]), frame(0, 0, 1, b"x")].concat(),
            Fallback::Interleaved {
                frame_type: 0,
                stream_id: 1,
            },
        ),
        (
            "CONTINUATION of another stream",
            [
                start(),
                frame(HEADERS, 0, 1, &[0x82]),
                frame(CONTINUATION, END_HEADERS, 3, &[0x82]),
            ]
            .concat(),
            Fallback::Interleaved {
                frame_type: CONTINUATION,
                stream_id: 3,
            },
        ),
        (
            "CONTINUATION alone",
            [start(), frame(CONTINUATION, END_HEADERS, 1, &[0x82])].concat(),
            Fallback::Interleaved {
                frame_type: CONTINUATION,
                stream_id: 1,
            },
        ),
        (
            "PUSH_PROMISE",
            [start(), frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2])].concat(),
            Fallback::PushPromise,
        ),
        (
            "padding past the frame",
            [start(), frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82])].concat(),
            Fallback::Padding,
        ),
        (
            "priority past the frame",
            [start(), frame(HEADERS, END_HEADERS | PRIORITY, 1, &[0, 0])].concat(),
            Fallback::Padding,
        ),
        (
            "header block over 1 MiB",
            too_large,
            Fallback::BlockTooLarge,
        ),
        (
            "empty CONTINUATION frames without end",
            empty_frames,
            Fallback::BlockTooLarge,
        ),
    ];
    for (case, mut input, reason) in cases {
        // After the fallback, a refused authority goes as it came.
        input.extend(headers(99, &invalid));
        let (out, rewriter) = rewrite(&input);
        assert_eq!(rewriter.fallback(), Some(&reason), "{case}");
        assert_eq!(rewriter.rewritten(), 0, "{case}");
        assert!(out == input, "{case}: output differs");
        // In pieces, the same.
        let mut pieces = AuthorityRewriter::new();
        let mut out = Vec::new();
        for chunk in input.chunks(1000) {
            pieces.feed(chunk, &mut out);
        }
        pieces.finish(&mut out);
        assert!(out == input, "{case}: output in pieces differs");
    }
}

#[test]
fn any_cut_gives_the_same_output() {
    let (whole, _) = rewrite(GRPCIO);
    for cut in 0..=GRPCIO.len() {
        let mut rewriter = AuthorityRewriter::new();
        let mut out = Vec::new();
        rewriter.feed(&GRPCIO[..cut], &mut out);
        rewriter.feed(&GRPCIO[cut..], &mut out);
        rewriter.finish(&mut out);
        assert_eq!(out, whole, "cut at {cut}");
    }
    let mut rewriter = AuthorityRewriter::new();
    let mut out = Vec::new();
    for byte in GRPCIO {
        rewriter.feed(std::slice::from_ref(byte), &mut out);
    }
    assert_eq!(rewriter.held(), 0);
    assert_eq!(out, whole);
}

#[test]
fn data_streams_through_without_being_held() {
    let mut rewriter = AuthorityRewriter::new();
    let mut out = Vec::new();
    let input = [start(), frame(0, 0, 1, &vec![7; 100_000])].concat();
    for chunk in input.chunks(4096) {
        let before = out.len();
        rewriter.feed(chunk, &mut out);
        assert_eq!(out.len() - before, chunk.len());
        assert_eq!(rewriter.held(), 0);
    }
    assert_eq!(out, input);

    // Cut inside a header block, the client's bytes come out at the end as they were.
    let mut rewriter = AuthorityRewriter::new();
    let mut out = Vec::new();
    let input = [start(), frame(HEADERS, 0, 1, &[0x82])].concat();
    rewriter.feed(&input[..input.len() - 3], &mut out);
    assert_eq!(rewriter.held(), 7);
    rewriter.feed(&input[input.len() - 3..], &mut out);
    assert_eq!(rewriter.held(), 10);
    rewriter.finish(&mut out);
    assert_eq!(out, input);
}
