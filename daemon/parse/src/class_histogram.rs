//! Parser for HotSpot's class histogram: what `jcmd PID GC.class_histogram` and `jmap -histo`
//! print, instances and bytes per class of the Java heap.
//!
//! ```text
//!  num     #instances         #bytes  class name (module)
//! -------------------------------------------------------
//!    1:         13028         793848  [B (java.base@17.0.15)
//!    2:          3002         360856  java.lang.Class (java.base@17.0.15)
//!  699:             1             16  Leaky
//! Total         59000        2818064
//! ```
//!
//! Class names are the JVM's (`[B`, `[Ljava.lang.Object;`, `Foo$Bar`, hidden classes with a
//! `/0x...` suffix) and may hold spaces (Kotlin's `Test$my test$1`): a class is the rest of its
//! row. The module follows in parentheses when the class is in a named one (JDK 9 on; JDK 8's
//! header has no "(module)"). The text comes from a process the
//! daemon does not trust: a line it cannot read, a count that does not add up to the total or
//! more rows than [`MAX_CLASSES`] is an error naming the line, never a partial histogram.

/// Most classes a histogram may have: a JVM with a million loaded classes is far past any real
/// one (a large application server loads some 100,000), and each row costs the daemon memory.
pub const MAX_CLASSES: usize = 1 << 20;

/// One row: the instances of a class alive (or all, with `-all`) and the bytes they take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassRow {
    /// The class, as the JVM names it (`java.lang.String`, `[B`).
    pub name: String,
    /// Its module (`java.base@17.0.15`), empty for a class of the unnamed module.
    pub module: String,
    /// Its instances.
    pub instances: u64,
    /// Their shallow size in bytes.
    pub bytes: u64,
}

/// A whole histogram, in the JVM's order (most bytes first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassHistogram {
    /// Its rows.
    pub classes: Vec<ClassRow>,
    /// The `Total` line's instances: the rows' sum.
    pub total_instances: u64,
    /// The `Total` line's bytes: the rows' sum.
    pub total_bytes: u64,
}

/// Why a histogram could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// The header line is missing: not a class histogram (an error message, another command).
    #[error("no class histogram header in the output: {start:?}")]
    NoHeader {
        /// The output's first line, cut to 200 bytes.
        start: String,
    },
    /// A line that is neither a row nor the total.
    #[error("line {line} of the class histogram is not a row: {text:?}")]
    BadLine {
        /// Its number, from 1.
        line: usize,
        /// The line, cut to 200 bytes.
        text: String,
    },
    /// No `Total` line: the output was cut short.
    #[error("the class histogram has no Total line (cut short after {rows} rows)")]
    NoTotal {
        /// The rows read.
        rows: usize,
    },
    /// The rows do not add up to the total.
    #[error(
        "the class histogram's rows add up to {instances} instances and {bytes} bytes, its \
         Total line says {total_instances} and {total_bytes}"
    )]
    Inconsistent {
        /// The rows' sum of instances.
        instances: u64,
        /// The rows' sum of bytes.
        bytes: u64,
        /// The Total line's instances.
        total_instances: u64,
        /// The Total line's bytes.
        total_bytes: u64,
    },
    /// More rows than [`MAX_CLASSES`].
    #[error("the class histogram has more than {MAX_CLASSES} classes")]
    TooManyClasses,
}

/// The first word of `text` (which starts with it) and what follows it, without the
/// whitespace between.
fn next_word(text: &str) -> Option<(&str, &str)> {
    if text.is_empty() {
        return None;
    }
    Some(match text.find(char::is_whitespace) {
        Some(end) => (&text[..end], text[end..].trim_start()),
        None => (text, ""),
    })
}

fn cut(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Parses a class histogram. Text before the header (jcmd prints the pid) is skipped; text
/// after the `Total` line is ignored.
pub fn parse_class_histogram(text: &str) -> Result<ClassHistogram, HistogramError> {
    let mut lines = text.lines().enumerate();
    let is_header = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.starts_with(&["num", "#instances", "#bytes", "class", "name"])
    };
    if !lines.by_ref().any(|(_, line)| is_header(line)) {
        return Err(HistogramError::NoHeader {
            start: cut(text.lines().next().unwrap_or_default()),
        });
    }
    let mut histogram = ClassHistogram::default();
    let (mut instances, mut bytes) = (0u64, 0u64);
    for (i, line) in lines {
        let bad = || HistogramError::BadLine {
            line: i + 1,
            text: cut(line),
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.bytes().all(|b| b == b'-') {
            continue;
        }
        let (first, rest) = next_word(trimmed).ok_or_else(bad)?;
        let number = |word: &str| word.parse::<u64>().ok().ok_or_else(bad);
        if first == "Total" {
            let (instances_word, rest) = next_word(rest).ok_or_else(bad)?;
            let (bytes_word, rest) = next_word(rest).ok_or_else(bad)?;
            if !rest.is_empty() {
                return Err(bad());
            }
            histogram.total_instances = number(instances_word)?;
            histogram.total_bytes = number(bytes_word)?;
            if (instances, bytes) != (histogram.total_instances, histogram.total_bytes) {
                return Err(HistogramError::Inconsistent {
                    instances,
                    bytes,
                    total_instances: histogram.total_instances,
                    total_bytes: histogram.total_bytes,
                });
            }
            return Ok(histogram);
        }
        first
            .strip_suffix(':')
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(bad)?;
        let (instances_word, rest) = next_word(rest).ok_or_else(bad)?;
        let (bytes_word, rest) = next_word(rest).ok_or_else(bad)?;
        let (row_instances, row_bytes) = (number(instances_word)?, number(bytes_word)?);
        if rest.is_empty() {
            return Err(bad());
        }
        // The rest is the class, which may hold spaces (the JVM allows them; Kotlin makes
        // them), and its module in parentheses after a space.
        let (name, module) = match rest.strip_suffix(')').and_then(|r| r.rsplit_once(" (")) {
            Some((name, module))
                if !name.trim_end().is_empty()
                    && !module.is_empty()
                    && !module.contains(char::is_whitespace) =>
            {
                (name.trim_end().to_owned(), module.to_owned())
            }
            _ => (rest.to_owned(), String::new()),
        };
        if histogram.classes.len() == MAX_CLASSES {
            return Err(HistogramError::TooManyClasses);
        }
        instances = instances.checked_add(row_instances).ok_or_else(bad)?;
        bytes = bytes.checked_add(row_bytes).ok_or_else(bad)?;
        histogram.classes.push(ClassRow {
            name,
            module,
            instances: row_instances,
            bytes: row_bytes,
        });
    }
    Err(HistogramError::NoTotal {
        rows: histogram.classes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JDK 17's `GC.class_histogram` as the attach listener sends it (no pid line), cut.
    const JDK17: &str = " num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:         13028         793848  [B (java.base@17.0.15)
   2:          3002         360856  java.lang.Class (java.base@17.0.15)
   3:        123457        2962968  Leaky
   4:             1             16  java.lang.invoke.LambdaForm$MH/0x0000000800c01000 (java.base@17.0.15)
Total        139488        4117688
";

    #[test]
    fn rows_and_total_are_read_with_their_modules() {
        let h = parse_class_histogram(JDK17).unwrap();
        assert_eq!(h.classes.len(), 4);
        assert_eq!(
            h.classes[0],
            ClassRow {
                name: "[B".into(),
                module: "java.base@17.0.15".into(),
                instances: 13028,
                bytes: 793848
            }
        );
        assert_eq!(h.classes[2].name, "Leaky");
        assert_eq!(h.classes[2].module, "", "the unnamed module");
        assert_eq!(h.classes[2].instances, 123457);
        assert_eq!(
            h.classes[3].name,
            "java.lang.invoke.LambdaForm$MH/0x0000000800c01000"
        );
        assert_eq!((h.total_instances, h.total_bytes), (139488, 4117688));
    }

    #[test]
    fn jcmds_pid_line_and_jdk8s_header_are_accepted() {
        let text = "7323:\n num     #instances         #bytes  class name\n\
                    ----------------------------------------------\n   \
                    1:             2             32  Foo\nTotal             2             32\n";
        let h = parse_class_histogram(text).unwrap();
        assert_eq!(h.classes[0].name, "Foo");
        assert_eq!(h.total_instances, 2);
    }

    #[test]
    fn class_names_may_hold_spaces() {
        let text = JDK17
            .replace("  Leaky\n", "  Test$my test$1\n")
            .replace("[B (java.base", "[B x (java.base");
        let h = parse_class_histogram(&text).unwrap();
        assert_eq!(h.classes[2].name, "Test$my test$1");
        assert_eq!(h.classes[2].module, "");
        assert_eq!(
            (h.classes[0].name.as_str(), h.classes[0].module.as_str()),
            ("[B x", "java.base@17.0.15")
        );
    }

    #[test]
    fn an_error_message_is_no_histogram() {
        let err = parse_class_histogram("java.lang.IllegalArgumentException: Unknown argument\n")
            .unwrap_err();
        assert!(matches!(err, HistogramError::NoHeader { .. }), "{err}");
        assert!(err.to_string().contains("Unknown argument"), "{err}");
    }

    #[test]
    fn a_cut_or_altered_histogram_is_refused() {
        let cut_short = &JDK17[..JDK17.find("Total").unwrap()];
        assert_eq!(
            parse_class_histogram(cut_short),
            Err(HistogramError::NoTotal { rows: 4 })
        );
        let wrong_total = JDK17.replace("Total        139488", "Total        139489");
        assert!(matches!(
            parse_class_histogram(&wrong_total),
            Err(HistogramError::Inconsistent { .. })
        ));
        let bad_count = JDK17.replace("13028", "13x28");
        assert!(matches!(
            parse_class_histogram(&bad_count),
            Err(HistogramError::BadLine { line: 3, .. })
        ));
        let no_class = JDK17.replace("Leaky", "");
        assert!(matches!(
            parse_class_histogram(&no_class),
            Err(HistogramError::BadLine { line: 5, .. })
        ));
        let overflow = format!(
            " num     #instances         #bytes  class name\n   1: {m} 1 A\n   2: {m} 1 B\nTotal 0 0\n",
            m = u64::MAX
        );
        assert!(matches!(
            parse_class_histogram(&overflow),
            Err(HistogramError::BadLine { line: 3, .. })
        ));
    }
}
