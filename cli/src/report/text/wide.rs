//! The text report's wide layout (`--wide`, a name width of 0): names whole, after the numbers,
//! as perf prints them.
//!
//! Padding every row to the longest name, as the normal layout does, made a 500-character C++
//! name push every row's numbers 500 columns right. Here the numbers come first, in columns
//! aligned across all sections, and each line ends with its name or label, however long:
//!
//! ```text
//!       % (% of total)  (samples) (cumulative)  generated vm code
//!  99.76%     (99.07%)     (4164)     (99.76%)  Inline>>run [optimised]
//!                            (115)      (2.81%)     2.76%  Inline>>heavy 1->15
//!                                                 inlined:
//!                           (2864)                 68.78%  Inline>>heavy (inlined)
//! ```
//!
//! A section's heading names the columns, its title heading the names. Lines under a row
//! (ranges, inlined methods) carry their samples and cumulative % of the method in the row's
//! columns, then their % of the method before their label, indented under the row's name as
//! in the normal layout.

use std::io::{self, Write};

use super::{
    CUMULATIVE_HEADING, Cells, DETAIL_GAP, DETAIL_MARGIN, Detail, INCLUSIVE_HEADING,
    INLINED_HEADING, NumberWidths, Tables,
};

/// Heading of the % of section column.
const OF_SECTION_HEADING: &str = "%";
/// Heading of the % of total column.
const OF_TOTAL_HEADING: &str = "(% of total)";

/// Writes one table per section of `report`, `tables` holding each section's cells.
pub(super) fn write_tables(
    report: &Tables<'_>,
    tables: &[(String, Vec<Cells>)],
    out: &mut impl Write,
) -> io::Result<()> {
    let samples_heading = report.count_heading();
    let NumberWidths {
        of_section: of_section_width,
        of_total: of_total_width,
        samples: samples_width,
        cumulative: cumulative_width,
        inclusive: inclusive_width,
        detail_percent: detail_percent_width,
    } = NumberWidths::of(
        tables,
        OF_TOTAL_HEADING.len(),
        report.call_graph,
        samples_heading,
    );
    // The numbers every line starts with: blanks where a line has none.
    let numbers = |of_section: &str, of_total: &str, samples: &str, cumulative: &str| {
        format!(
            "{of_section:>of_section_width$} {of_total:>of_total_width$}  \
             {samples:>samples_width$} {cumulative:>cumulative_width$}  "
        )
    };
    // With stacks, the inclusive column follows (blank on lines without one); without, the
    // layout stays as it was.
    let numbers_inclusive =
        |of_section: &str, of_total: &str, samples: &str, cumulative: &str, inclusive: &str| {
            let numbers = numbers(of_section, of_total, samples, cumulative);
            if report.call_graph {
                format!(
                    "{}{inclusive:>inclusive_width$}  ",
                    &numbers[..numbers.len() - 1]
                )
            } else {
                numbers
            }
        };

    for (section, (_, cells)) in report.sections.iter().zip(tables) {
        writeln!(out)?;
        writeln!(
            out,
            "{}{}",
            numbers_inclusive(
                OF_SECTION_HEADING,
                OF_TOTAL_HEADING,
                samples_heading,
                CUMULATIVE_HEADING,
                INCLUSIVE_HEADING
            ),
            section.title
        )?;
        if cells.is_empty() {
            writeln!(out, "{}", report.empty())?;
        }
        for c in cells {
            writeln!(
                out,
                "{}{}",
                numbers_inclusive(
                    &c.of_section,
                    &c.of_total,
                    &c.samples,
                    &c.cumulative,
                    &c.inclusive
                ),
                c.label
            )?;
            for detail in &c.details {
                match detail {
                    Detail::Range {
                        percent,
                        label,
                        samples,
                        cumulative,
                    } => writeln!(
                        out,
                        "{}{DETAIL_MARGIN}{percent:>detail_percent_width$}{DETAIL_GAP}{label}",
                        numbers_inclusive("", "", samples, cumulative, "")
                    )?,
                    Detail::InlinedHeading => writeln!(
                        out,
                        "{}{DETAIL_MARGIN}{INLINED_HEADING}",
                        numbers_inclusive("", "", "", "", "")
                    )?,
                    Detail::Inlined {
                        percent,
                        label,
                        samples,
                    } => writeln!(
                        out,
                        "{}{DETAIL_MARGIN}{percent:>detail_percent_width$}{DETAIL_GAP}{label}",
                        numbers_inclusive("", "", samples, "", "")
                    )?,
                }
            }
        }
    }
    Ok(())
}
