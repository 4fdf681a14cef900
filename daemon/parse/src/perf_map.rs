//! Parser for perf maps, `/tmp/perf-PID.map`: the names a JIT gives to the code it generates.
//!
//! A VM started with the right option (V8 `--perf-basic-prof`, HotSpot `jcmd PID
//! Compiler.perfmap`, wasmtime `--profile=perfmap`, .NET `DOTNET_PerfMapEnabled=1`, ...) appends
//! one line per piece of generated code, for as long as it runs:
//!
//! ```text
//! 3a8e4b8a0c0 1c LazyCompile:~foo /tmp/app.js:1:10
//! 0x00007f1b2c0004e0 0x0000000000000140 void java.lang.Thread.run()
//! 0x7f5e1c001000 0x5a wasm[0]::function[3]::fib
//! ```
//!
//! Fields: the start address and the size in bytes, both hexadecimal, with or without a `0x`
//! prefix and often zero-padded (HotSpot), then the name, which is the rest of the line and may
//! contain spaces. One space separates the fields; runs of spaces and tabs are accepted too. A
//! later line for the same addresses replaces an earlier one (code is freed and reused), which
//! is for the caller to apply: this module only reads lines.
//!
//! The file grows while the VM runs, so parsing is incremental: the daemon hands over the bytes
//! it has not consumed yet, and [`PerfMapReader::parse`] consumes complete lines only, leaving a
//! final line without its newline for the next read (the writer may be in the middle of it),
//! unless the caller says the file is complete. Bad lines are skipped and counted, never fatal
//! for the file: one writer's odd line must not hide all the others.

/// Longest line accepted, in bytes (without its newline). Longer lines are consumed and counted
/// as bad, which bounds what the daemon holds while it waits for the end of a line.
pub const MAX_LINE_LEN: usize = 64 * 1024;

/// One line of a perf map: generated code `[start, start + size)` and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMapEntry {
    /// First address of the code.
    pub start: u64,
    /// Bytes of code; never 0, and `start + size` never overflows `u64`.
    pub size: u64,
    /// The name the VM gives the code (`LazyCompile:~foo /tmp/app.js:1:10`), never empty.
    pub name: String,
}

impl PerfMapEntry {
    /// One past the last address of the code (exclusive).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }

    /// True when `addr` lies in `[start, start + size)`.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end()
    }
}

/// What one call of [`parse_perf_map`] or [`PerfMapReader::parse`] made of its bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfMapChunk {
    /// The good lines, in file order.
    pub entries: Vec<PerfMapEntry>,
    /// How many bytes were consumed: the next call starts at `bytes[consumed..]`. Everything up
    /// to the last newline, plus the final line when the file is complete (or when that line is
    /// already longer than [`MAX_LINE_LEN`]).
    pub consumed: usize,
    /// How many non-empty lines could not be parsed and were skipped.
    pub bad_lines: usize,
    /// The first bad line's reason, with its line number counted from the start of the bytes
    /// given to this call (not of the file), for a diagnostic.
    pub first_error: Option<String>,
}

/// Why one line of a perf map could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PerfMapLineError {
    /// The line ended before this field.
    #[error("missing {0}")]
    MissingField(&'static str),
    /// A number that is not hexadecimal, or does not fit in 64 bits.
    #[error("{field} {value:?} is not a 64-bit hexadecimal number")]
    BadNumber {
        /// Which field: `start` or `size`.
        field: &'static str,
        /// Its text, lossy and truncated.
        value: String,
    },
    /// A size of 0: nothing could be attributed to it.
    #[error("size is 0")]
    ZeroSize,
    /// `start + size` is beyond the 64-bit address space.
    #[error("range {start:#x} + {size:#x} overflows the address space")]
    Overflow {
        /// The parsed start.
        start: u64,
        /// The parsed size.
        size: u64,
    },
    /// The name is not UTF-8. Refused rather than made lossy, since names are shown to users and
    /// compared: a writer that produces such names is broken.
    #[error("name is not UTF-8")]
    NameNotUtf8,
    /// The line is longer than [`MAX_LINE_LEN`].
    #[error("line of {0} bytes or more is longer than the 64 KiB limit")]
    TooLong(usize),
}

/// Reads a growing perf map: [`PerfMapReader::parse`] on each new read, with the bytes not
/// consumed yet. The only state kept between calls is whether the previous call stopped inside
/// a line longer than [`MAX_LINE_LEN`], whose rest must then be skipped rather than read as a
/// line of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfMapReader {
    in_long_line: bool,
}

impl PerfMapReader {
    /// A reader at the start of a file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the complete lines of `bytes`, the part of the file not consumed yet. A final line
    /// without `'\n'` is left unconsumed unless `at_eof` (the writer may be in the middle of it),
    /// or unless it is already longer than [`MAX_LINE_LEN`]: it is then consumed and counted as
    /// bad, and the next call skips the rest of it up to its newline.
    pub fn parse(&mut self, bytes: &[u8], at_eof: bool) -> PerfMapChunk {
        let mut out = PerfMapChunk::default();
        let mut pos = 0;
        let mut line_no = 0;
        if self.in_long_line {
            // The rest of a line already counted as bad.
            match memchr(b'\n', bytes) {
                Some(nl) => {
                    pos = nl + 1;
                    line_no = 1;
                    self.in_long_line = false;
                }
                None => {
                    out.consumed = bytes.len();
                    self.in_long_line = !at_eof;
                    return out;
                }
            }
        }
        while let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) {
            line_no += 1;
            let (line, next) = match memchr(b'\n', rest) {
                Some(nl) => (rest.get(..nl).unwrap_or_default(), pos + nl + 1),
                None if at_eof => (rest, bytes.len()),
                None if rest.len() > MAX_LINE_LEN => {
                    out.bad(line_no, &PerfMapLineError::TooLong(rest.len()));
                    out.consumed = bytes.len();
                    self.in_long_line = true;
                    return out;
                }
                None => break,
            };
            pos = next;
            if line.is_empty() || line == b"\r" {
                continue;
            }
            match parse_perf_map_line(line) {
                Ok(entry) => out.entries.push(entry),
                Err(err) => out.bad(line_no, &err),
            }
        }
        out.consumed = pos;
        out
    }
}

impl PerfMapChunk {
    fn bad(&mut self, line_no: usize, err: &PerfMapLineError) {
        self.bad_lines += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("line {line_no}: {err}"));
        }
    }
}

/// Parses the complete lines of `bytes`. A final line without `'\n'` is left unconsumed unless
/// `at_eof` (the writer may be in the middle of it).
///
/// Stateless: right for a file read whole, or read in parts whose lines are all shorter than
/// [`MAX_LINE_LEN`]. A daemon following a growing file uses a [`PerfMapReader`], which also
/// skips the rest of an over-long line that a previous read ended in.
pub fn parse_perf_map(bytes: &[u8], at_eof: bool) -> PerfMapChunk {
    PerfMapReader::new().parse(bytes, at_eof)
}

/// Parses one line of a perf map, without its newline (a trailing `'\r'` is accepted). Exposed
/// for callers with lines of their own and for fuzzing.
pub fn parse_perf_map_line(line: &[u8]) -> Result<PerfMapEntry, PerfMapLineError> {
    if line.len() > MAX_LINE_LEN {
        return Err(PerfMapLineError::TooLong(line.len()));
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut rest = line;
    let start = next_field(&mut rest).ok_or(PerfMapLineError::MissingField("start"))?;
    let size = next_field(&mut rest).ok_or(PerfMapLineError::MissingField("size"))?;
    let name = trim_blanks(rest);
    let start = parse_hex(start).ok_or_else(|| bad_number("start", start))?;
    let size = parse_hex(size).ok_or_else(|| bad_number("size", size))?;
    if size == 0 {
        return Err(PerfMapLineError::ZeroSize);
    }
    if start.checked_add(size).is_none() {
        return Err(PerfMapLineError::Overflow { start, size });
    }
    if name.is_empty() {
        return Err(PerfMapLineError::MissingField("name"));
    }
    let name = std::str::from_utf8(name).map_err(|_| PerfMapLineError::NameNotUtf8)?;
    Ok(PerfMapEntry {
        start,
        size,
        name: name.to_owned(),
    })
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_blanks(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| is_blank(b)).count();
    s.get(n..).unwrap_or_default()
}

/// Takes the next blank-separated field from `rest`, skipping leading blanks.
fn next_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = trim_blanks(rest);
    if s.is_empty() {
        return None;
    }
    let end = s.iter().position(|&b| is_blank(b)).unwrap_or(s.len());
    let (field, tail) = s.split_at(end);
    *rest = tail;
    Some(field)
}

/// Hex digits with an optional `0x`/`0X` prefix and any zero padding, checked for overflow.
fn parse_hex(s: &[u8]) -> Option<u64> {
    let digits = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// A [`PerfMapLineError::BadNumber`] with the value shortened so garbage cannot bloat messages.
fn bad_number(field: &'static str, value: &[u8]) -> PerfMapLineError {
    PerfMapLineError::BadNumber {
        field,
        value: String::from_utf8_lossy(value.get(..40).unwrap_or(value)).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(start: u64, size: u64, name: &str) -> PerfMapEntry {
        PerfMapEntry {
            start,
            size,
            name: name.to_owned(),
        }
    }

    /// Lines as writers really print them, and what they mean.
    const GOOD: &[(&[u8], u64, u64, &str)] = &[
        // V8 --perf-basic-prof
        (
            b"3a8e4b8a0c0 1c LazyCompile:~foo /tmp/app.js:1:10",
            0x3a8_e4b8_a0c0,
            0x1c,
            "LazyCompile:~foo /tmp/app.js:1:10",
        ),
        (
            b"7f3d8c0a1b40 2a0 JS:*f [eval]:1:11",
            0x7f3d_8c0a_1b40,
            0x2a0,
            "JS:*f [eval]:1:11",
        ),
        // HotSpot Compiler.perfmap: zero-padded, with 0x.
        (
            b"0x00007f1b2c0004e0 0x0000000000000140 void java.lang.Thread.run()",
            0x7f1b_2c00_04e0,
            0x140,
            "void java.lang.Thread.run()",
        ),
        // wasmtime --profile=perfmap
        (
            b"0x7f5e1c001000 0x5a wasm[0]::function[3]::fib",
            0x7f5e_1c00_1000,
            0x5a,
            "wasm[0]::function[3]::fib",
        ),
        (b"0X1000 0XFF Upper", 0x1000, 0xff, "Upper"),
        // Runs of spaces and tabs between fields; the name keeps its own spaces and tabs.
        (
            b"1000 \t 10\t\t[unknown] stub\twith\ttabs",
            0x1000,
            0x10,
            "[unknown] stub\twith\ttabs",
        ),
        (b"  1000 10 leading blanks", 0x1000, 0x10, "leading blanks"),
        (b"1000 10 crlf\r", 0x1000, 0x10, "crlf"),
        (b"1000 10 trailing ", 0x1000, 0x10, "trailing "),
        (
            b"1000 10 caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\xa6\x80",
            0x1000,
            0x10,
            "café → 🦀",
        ),
        (
            b"0000000000000000000000001000 0000000010 padded",
            0x1000,
            0x10,
            "padded",
        ),
        (
            b"ffffffffffffff00 ff top of the address space",
            0xffff_ffff_ffff_ff00,
            0xff,
            "top of the address space",
        ),
    ];

    #[test]
    fn good_lines_table() {
        for &(line, start, size, name) in GOOD {
            let shown = String::from_utf8_lossy(line);
            let e = parse_perf_map_line(line).unwrap_or_else(|err| panic!("{shown}: {err}"));
            assert_eq!(e, entry(start, size, name), "{shown}");
            assert!(e.contains(start) && e.contains(start + size - 1) && !e.contains(e.end()));
        }
    }

    #[test]
    fn bad_lines_table() {
        let long = [b'a'; MAX_LINE_LEN + 1];
        let cases: &[(&[u8], &str)] = &[
            (b"1000", "missing size"),
            (b"1000 10", "missing name"),
            (b"1000 10 \t ", "missing name"),
            (b"  \t", "missing start"),
            (
                b"xyz 10 f",
                "start \"xyz\" is not a 64-bit hexadecimal number",
            ),
            (
                b"1000 1g f",
                "size \"1g\" is not a 64-bit hexadecimal number",
            ),
            (
                b"0x 10 f",
                "start \"0x\" is not a 64-bit hexadecimal number",
            ),
            (
                b"-1000 10 f",
                "start \"-1000\" is not a 64-bit hexadecimal number",
            ),
            (
                b"+1000 10 f",
                "start \"+1000\" is not a 64-bit hexadecimal number",
            ),
            (
                b"0x0x10 10 f",
                "start \"0x0x10\" is not a 64-bit hexadecimal number",
            ),
            (
                b"10000000000000000 10 f",
                "start \"10000000000000000\" is not a 64-bit hexadecimal number",
            ),
            (b"1000 0 f", "size is 0"),
            (b"1000 0x0000 f", "size is 0"),
            (
                b"ffffffffffffff00 100 f",
                "range 0xffffffffffffff00 + 0x100 overflows the address space",
            ),
            (b"1000 10 \xff\xfe", "name is not UTF-8"),
            (b"1000 10 ok\xc3", "name is not UTF-8"),
            (
                &long,
                "line of 65537 bytes or more is longer than the 64 KiB limit",
            ),
        ];
        for (line, msg) in cases {
            let shown = String::from_utf8_lossy(&line[..line.len().min(40)]).into_owned();
            let err = parse_perf_map_line(line).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{shown}");
        }
    }

    const FILE: &[u8] = b"3a8e4b8a0c0 1c LazyCompile:~foo /tmp/app.js:1:10\n\
        \n\
        0x00007f1b2c0004e0 0x0000000000000140 void java.lang.Thread.run()\r\n\
        \r\n\
        not a line\n\
        0x7f5e1c001000 0x5a wasm[0]::function[3]::fib\n\
        2000 0 empty\n\
        3000 10 last";

    #[test]
    fn whole_file_and_eof() {
        let chunk = parse_perf_map(FILE, false);
        assert_eq!(chunk.entries.len(), 3);
        assert_eq!(chunk.bad_lines, 2);
        assert_eq!(
            chunk.first_error.as_deref(),
            Some("line 5: start \"not\" is not a 64-bit hexadecimal number")
        );
        // The final line may still be being written.
        assert_eq!(chunk.consumed, FILE.len() - b"3000 10 last".len());

        let chunk = parse_perf_map(FILE, true);
        assert_eq!(chunk.consumed, FILE.len());
        assert_eq!(chunk.entries.len(), 4);
        assert_eq!(chunk.entries[3], entry(0x3000, 0x10, "last"));
        assert_eq!(chunk.entries[1].name, "void java.lang.Thread.run()");

        assert_eq!(parse_perf_map(b"", false), PerfMapChunk::default());
        assert_eq!(parse_perf_map(b"", true), PerfMapChunk::default());
        let blank = parse_perf_map(b"\n\r\n\n", false);
        assert_eq!((blank.consumed, blank.bad_lines), (4, 0));
        let partial = parse_perf_map(b"1000 10 fo", false);
        assert_eq!((partial.consumed, partial.entries.len()), (0, 0));
        // A lone '\r' at EOF may be the first half of "\r\n": not an error either way.
        let cr = parse_perf_map(b"1000 10 foo\r", true);
        assert_eq!(cr.entries, vec![entry(0x1000, 0x10, "foo")]);
    }

    /// The daemon's use: the file read in two parts, cut anywhere, gives the same entries as
    /// the file read whole.
    #[test]
    fn split_at_every_byte() {
        let whole = parse_perf_map(FILE, true);
        for cut in 0..=FILE.len() {
            let mut reader = PerfMapReader::new();
            let first = reader.parse(&FILE[..cut], false);
            assert!(first.consumed <= cut);
            let mut rest = FILE[first.consumed..cut].to_vec();
            rest.extend_from_slice(&FILE[cut..]);
            let second = reader.parse(&rest, true);
            assert_eq!(second.consumed, rest.len(), "cut at {cut}");
            let mut entries = first.entries;
            entries.extend(second.entries);
            assert_eq!(entries, whole.entries, "cut at {cut}");
            assert_eq!(first.bad_lines + second.bad_lines, whole.bad_lines);
        }
    }

    /// A line longer than the limit is consumed and counted once, even when it arrives in
    /// pieces, and the lines around it are read.
    #[test]
    fn long_lines_are_bounded() {
        let mut file = b"1000 10 before\n2000 10 ".to_vec();
        file.extend(std::iter::repeat_n(b'x', MAX_LINE_LEN + 100));
        file.extend_from_slice(b"\n3000 10 after\n");
        let whole = parse_perf_map(&file, false);
        assert_eq!(whole.consumed, file.len());
        assert_eq!(whole.bad_lines, 1);
        assert_eq!(whole.entries.len(), 2);

        let mut reader = PerfMapReader::new();
        let mut entries = Vec::new();
        let mut bad = 0;
        let mut pending = Vec::new();
        for piece in file.chunks(10_000) {
            pending.extend_from_slice(piece);
            let chunk = reader.parse(&pending, false);
            // Never more than a line's worth of bytes is left waiting.
            assert!(pending.len() - chunk.consumed <= MAX_LINE_LEN);
            pending.drain(..chunk.consumed);
            entries.extend(chunk.entries);
            bad += chunk.bad_lines;
        }
        assert!(pending.is_empty());
        assert_eq!((entries, bad), (whole.entries, 1));
    }
}
