//! An error and its causes on one line, each said once.
//!
//! anyhow's `{:#}` joins every error of the chain with ": ". Some libraries' errors already
//! include their source's message in their own and return it as `source()` too (tonic's
//! transport errors do: "transport error: No such file or directory (os error 2): No such
//! file or directory (os error 2)"), so the words of one cause would be printed twice. Our own
//! errors never do both (see the daemon's and the parsers' error types); this drops the
//! repetition that others bring.

use std::error::Error;

/// `error` and its causes joined with ": ", leaving out a cause whose message the line already
/// ends with.
pub fn chain_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        append(&mut text, cause);
    }
    text
}

fn append(text: &mut String, cause: &(dyn Error + 'static)) {
    let message = cause.to_string();
    if message.is_empty() || text.ends_with(&message) {
        return;
    }
    if !text.is_empty() {
        text.push_str(": ");
    }
    text.push_str(&message);
}

#[cfg(test)]
mod tests {
    use std::{fmt, io};

    use super::*;

    /// An error that says its source's message and returns it too, as tonic's do.
    #[derive(Debug)]
    struct Repeats(io::Error);

    impl fmt::Display for Repeats {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)
        }
    }

    impl Error for Repeats {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_repeated_by_its_wrapper_is_said_once() {
        let io = io::Error::from_raw_os_error(libc::ENOENT);
        let error = anyhow::Error::new(Repeats(io))
            .context("transport error")
            .context("cannot reach vmscoped at /x.sock");
        let plain = format!("{error:#}");
        assert_eq!(
            plain.matches("(os error 2)").count(),
            2,
            "the case this exists for: {plain}"
        );
        assert_eq!(
            chain_text(&error),
            "cannot reach vmscoped at /x.sock: transport error: No such file or directory (os \
             error 2)"
        );
    }

    #[test]
    fn distinct_causes_are_all_said() {
        let error = anyhow::Error::new(io::Error::from_raw_os_error(libc::ENOSPC))
            .context("cannot write the report to /dev/full");
        assert_eq!(
            chain_text(&error),
            "cannot write the report to /dev/full: No space left on device (os error 28)"
        );
    }
}
