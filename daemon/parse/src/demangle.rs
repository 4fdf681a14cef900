//! Turning raw symbol names from ELF files into names a person can read.
//!
//! The daemon symbolises late: a sample is normalised early to (binary, file offset) while the
//! process lives, and only when a profile is built is each unique address looked up in the
//! binary's symbol table (see `elf.rs`) and its name passed through [`demangle`]. Names come
//! from arbitrary files on the host, so they are untrusted input: demangling must never panic,
//! must not recurse without bound (a hostile C++ name can nest thousands of levels deep) and must
//! not produce unbounded output (Itanium substitutions can expand exponentially). Whenever a
//! demangler gives up, the raw name is returned, which is still useful in a profile.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Longest demangled name kept. Real names, even heavily templated C++ ones, stay far below
/// this; the cap exists so that a name built to expand exponentially costs bounded work.
const MAX_DEMANGLED_LEN: usize = 64 * 1024;

/// Recursion limit for cpp_demangle's parser. 96 is the crate's documented default, chosen so
/// that even a debug build does not overflow a thread's stack; we set it explicitly so that a
/// change of default upstream cannot silently loosen it. Tokio worker threads have 2 MiB stacks.
const CPP_PARSE_RECURSION_LIMIT: u32 = 96;

/// Recursion limit for cpp_demangle's printer (the crate's default, made explicit for the same
/// reason as the parse limit).
const CPP_DEMANGLE_RECURSION_LIMIT: u32 = 128;

/// Demangles a symbol name for display: Rust (legacy `_ZN…E` and v0 `_R…`, without the
/// `::h0123456789abcdef` hash), then C++ (Itanium `_Z…`), anything else unchanged.
///
/// A trailing ELF symbol version (`memcpy@@GLIBC_2.14`, `foo@VERS_1`) is removed first: it is
/// not part of the name and would make every demangler reject the symbol. Never panics on any
/// input and bounds its work; on any failure the (version-stripped) input is returned as is.
pub fn demangle(name: &str) -> Cow<'_, str> {
    let name = strip_symbol_version(name);
    if let Some(rust) = demangle_rust(name) {
        return Cow::Owned(rust);
    }
    if let Some(cpp) = demangle_cpp(name) {
        return Cow::Owned(cpp);
    }
    Cow::Borrowed(name)
}

/// Removes an ELF symbol version suffix (`@VERS` or `@@VERS`). Mangled Rust and C++ names never
/// contain `@`, so cutting at the first one cannot damage a real name; a leading `@` is kept
/// because then there would be no name left.
fn strip_symbol_version(name: &str) -> &str {
    match name.find('@') {
        Some(at) if at > 0 => name.get(..at).unwrap_or(name),
        _ => name,
    }
}

fn demangle_rust(name: &str) -> Option<String> {
    let demangled = rustc_demangle::try_demangle(name).ok()?;
    let mut out = BoundedString::default();
    // The alternate form drops the legacy hash and v0 crate disambiguators, which only add
    // noise to a profile (the binary is already known).
    write!(out, "{demangled:#}").ok()?;
    Some(out.0)
}

fn demangle_cpp(name: &str) -> Option<String> {
    // Only Itanium names are handed over: cpp_demangle also accepts bare type encodings, which
    // would turn plain C names such as `i` or `f` into `int` and `float`.
    if !name.starts_with("_Z") {
        return None;
    }
    let parse_options =
        cpp_demangle::ParseOptions::default().recursion_limit(CPP_PARSE_RECURSION_LIMIT);
    let demangle_options =
        cpp_demangle::DemangleOptions::default().recursion_limit(CPP_DEMANGLE_RECURSION_LIMIT);
    // cpp_demangle is fuzzed and its recursion is limited above, but the names come from
    // untrusted files: should it still panic, losing one name is better than losing the
    // symbolising thread. (With panic=abort this is a no-op, which is no worse.)
    std::panic::catch_unwind(|| {
        let symbol =
            cpp_demangle::Symbol::new_with_options(name.as_bytes(), &parse_options).ok()?;
        let mut out = BoundedString::default();
        symbol
            .structured_demangle(&mut out, &demangle_options)
            .ok()?;
        Some(out.0)
    })
    .ok()
    .flatten()
}

/// A `fmt::Write` sink that fails once [`MAX_DEMANGLED_LEN`] would be exceeded; demanglers stop
/// at the first write error, which is what bounds their work on hostile names.
#[derive(Default)]
struct BoundedString(String);

impl fmt::Write for BoundedString {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.0.len().saturating_add(s.len()) > MAX_DEMANGLED_LEN {
            return Err(fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_known_names() {
        let cases: &[(&str, &str)] = &[
            // Rust legacy: the hash goes away.
            ("_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"),
            (
                "_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h9a52c0a4d2f1e1b3E",
                "std::rt::lang_start::{{closure}}",
            ),
            // Rust legacy with an LLVM suffix (thin LTO local copies).
            (
                "_ZN3foo3bar17h0123456789abcdefE.llvm.1234567890",
                "foo::bar",
            ),
            // Rust v0: the crate disambiguator goes away.
            ("_RNvCs1234_7mycrate3foo", "mycrate::foo"),
            ("_RNvNtCs1234_7mycrate6module4func", "mycrate::module::func"),
            // C++ Itanium, full form with parameters.
            ("_ZN3foo3barEi", "foo::bar(int)"),
            ("_Z3addii", "add(int, int)"),
            (
                "_ZNSt6vectorIiSaIiEE9push_backERKi",
                "std::vector<int, std::allocator<int> >::push_back(int const&)",
            ),
            // Versioned dynamic symbols.
            ("memcpy@@GLIBC_2.14", "memcpy"),
            ("memcpy@GLIBC_2.2.5", "memcpy"),
            ("_ZN3foo3barEi@@VERS_1", "foo::bar(int)"),
            // Not mangled: unchanged.
            ("main", "main"),
            ("vms_static_fn", "vms_static_fn"),
            ("i", "i"),
            ("", ""),
            ("@", "@"),
            // Broken mangled names: unchanged, no panic.
            ("_Z", "_Z"),
            ("_ZN", "_ZN"),
            ("_ZN3foo", "_ZN3foo"),
            ("_Z999999999999999999999x", "_Z999999999999999999999x"),
            ("_R", "_R"),
            ("_RNvC", "_RNvC"),
        ];
        for (mangled, want) in cases {
            assert_eq!(demangle(mangled), *want, "demangling {mangled:?}");
        }
    }

    #[test]
    fn plain_names_are_borrowed() {
        assert!(matches!(demangle("main"), Cow::Borrowed("main")));
        assert!(matches!(
            demangle("puts@GLIBC_2.2.5"),
            Cow::Borrowed("puts")
        ));
    }

    #[test]
    fn deeply_nested_cpp_name_is_refused_without_stack_overflow() {
        let hostile = format!("_Z{}i", "P".repeat(10_000));
        assert_eq!(demangle(&hostile), hostile.as_str());
        // Nested names and template arguments recurse through other productions.
        let nested = format!("_Z{}i", "N1a".repeat(5_000));
        assert_eq!(demangle(&nested), nested.as_str());
        let templates = format!("_Z1f{}i{}", "I1a".repeat(5_000), "E".repeat(5_000));
        assert_eq!(demangle(&templates), templates.as_str());
    }

    #[test]
    fn deeply_nested_rust_v0_name_does_not_overflow() {
        let hostile = format!("_R{}C1a", "Nv".repeat(10_000));
        // rustc-demangle has its own depth limit; either outcome is fine as long as it returns.
        let out = demangle(&hostile);
        assert!(!out.is_empty());
    }

    /// `_Z1f` with parameters A, C<A,A>, C<C<A,A>,C<A,A>>, ...: each one is two back-references
    /// to the previous one, so the demangled text doubles at every level.
    fn doubling_cpp_name(levels: u32) -> String {
        // Substitution numbers are base 36: S_, S0_, ..., S9_, SA_, ..., SZ_, S10_, ...
        let digit = |d: u32| char::from_digit(d, 36).unwrap_or('0').to_ascii_uppercase();
        let seq_id = |n: u32| {
            if n < 36 {
                digit(n).to_string()
            } else {
                format!("{}{}", digit(n / 36), digit(n % 36))
            }
        };
        let mut name = String::from("_Z1f1A1CIS_S_E");
        for level in 1..levels {
            let previous = seq_id(level);
            name.push_str(&format!("S0_IS{previous}_S{previous}_E"));
        }
        name
    }

    #[test]
    fn exponential_cpp_expansion_is_bounded() {
        // Ten levels (13 kB) demangle in full: the cap leaves room for real names.
        let moderate_name = doubling_cpp_name(10);
        let moderate = demangle(&moderate_name);
        assert!(
            moderate.starts_with("f(A, C<A, A>, C<C<A, A>, C<A, A> >, "),
            "{moderate}"
        );
        assert_eq!(moderate.len(), 13_263);
        // Forty levels would be a terabyte of text: refused, and quickly.
        let hostile = doubling_cpp_name(40);
        let started = std::time::Instant::now();
        assert_eq!(demangle(&hostile), hostile.as_str());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn random_garbage_never_panics() {
        // A small deterministic generator: tests stay reproducible without extra crates.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet = b"_ZRNIESPKcivx0123456789abcdefC$.@";
        for _ in 0..20_000 {
            let mut s = String::from(if state & 1 == 0 { "_Z" } else { "_R" });
            for _ in 0..(state >> 59) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let pick = (state % alphabet.len() as u64) as usize;
                s.push(char::from(*alphabet.get(pick).unwrap_or(&b'x')));
            }
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let _ = demangle(&s);
        }
    }
}
