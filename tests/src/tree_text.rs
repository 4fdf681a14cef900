//! The text call tree as a user reads it (`vmscope report ID --tree`): its lines parsed back
//! into nodes with their depth and samples, so that tests can check what the user sees (who is
//! directly under whom, with how many samples) rather than the model behind it.

use std::process::Command;

/// One line of a text call tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeLine {
    /// Indentation level: 0 for a root.
    pub depth: usize,
    /// Inclusive samples, the `(N)` column.
    pub samples: u64,
    /// The rest of the line: name, module, call sites, lines.
    pub label: String,
}

/// The node lines of a text call tree, in display order: every line after the column headings
/// that reads `incl.% self% (samples)  name`. Panics on a tree without headings, so that a
/// changed layout fails the test that reads it rather than giving it nothing to check.
pub fn tree_lines(text: &str) -> Vec<TreeLine> {
    let mut lines = text.lines();
    lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("incl.%"))
        .unwrap_or_else(|| panic!("no column headings in the tree:\n{text}"));
    lines
        .filter_map(|line| {
            let close = line.find(")  ")?;
            let open = line[..close].rfind('(')?;
            let samples = line[open + 1..close].parse().ok()?;
            let rest = &line[close + 3..];
            let name = rest.trim_start_matches(' ');
            Some(TreeLine {
                depth: (rest.len() - name.len()) / 2,
                samples,
                label: name.to_owned(),
            })
        })
        .collect()
}

/// Runs `vmscope` as `command` with `args` (a `report ID --tree ...`) and returns its standard
/// output, panicking with its standard error when it fails.
pub fn run_report(mut command: Command, args: &[&str]) -> String {
    let out = command
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run vmscope {args:?}: {e}"));
    assert!(
        out.status.success(),
        "vmscope {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the report is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_depth_samples_and_label() {
        let text = "\
call tree of 2010 samples
language view: ...

 incl.%   self%  (samples)  call tree (top-down)
 94.73%   7.46%     (1904)  Integer>>benchmark
 49.95%  14.93%     (1004)    Integer>>benchFib [74->78]
  0.20%                (4)      ...others... (1 node)
";
        assert_eq!(
            tree_lines(text),
            [
                TreeLine {
                    depth: 0,
                    samples: 1904,
                    label: "Integer>>benchmark".to_owned()
                },
                TreeLine {
                    depth: 1,
                    samples: 1004,
                    label: "Integer>>benchFib [74->78]".to_owned()
                },
                TreeLine {
                    depth: 2,
                    samples: 4,
                    label: "...others... (1 node)".to_owned()
                },
            ]
        );
    }

    #[test]
    #[should_panic(expected = "no column headings")]
    fn a_tree_without_headings_fails() {
        tree_lines("vmscope: something else");
    }
}
