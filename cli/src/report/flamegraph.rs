//! The flame graph: an SVG drawn by inferno from the profile's folded stacks
//! ([`vmscope_report::folded`]), one box per frame, as wide as its samples, callers below. The
//! stacks are those shown ([`ShownStacks`]: the language view unless `--native`), and the
//! subtitle says which view.
//!
//! Colours tell code apart the way inferno's and flamegraph.pl's `--colors=java` palette does
//! from the folded annotations: generated (JIT) code green (`_[j]`), methods inlined into
//! optimised code aqua (`_[i]`), kernel orange (`_[k]`). Native frames carry no annotation, and
//! the java palette would guess from their names (a capital letter or a dot reads as Java, hence
//! green, like JIT code: `Interpret`, `libc.so.6+0x10`): so every native frame's colour is
//! fixed beforehand to a red shade, and JIT code is never confused with the VM's own. Colours
//! come from a hash of the name, so that one function keeps its colour from one graph to the
//! next.

use std::io::{self, Write};

use inferno::flamegraph::{
    self, Options, Palette,
    color::{Color, MultiPalette, PaletteMap},
};
use vmscope_model as model;
use vmscope_report::{
    folded::{self, FoldedOptions},
    stack_view::ShownStacks,
};

/// Draws the flame graph of the `shown` stacks as SVG to `out`. A profile without samples has
/// nothing to draw: that is an error (`InvalidData`), and nothing is written.
pub fn render_flamegraph(shown: &ShownStacks<'_>, out: &mut impl Write) -> io::Result<()> {
    let profile: &model::Profile = &shown.profile;
    let stacks = folded::fold(profile, FoldedOptions::default());
    let samples: u64 = stacks.values().sum();
    if samples == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the profile has no samples with stacks: there is no flame graph to draw",
        ));
    }
    let lines: Vec<String> = stacks
        .iter()
        .map(|(frames, samples)| format!("{frames} {samples}"))
        .collect();

    let mut native_colors = PaletteMap::default();
    for frame in &profile.frames {
        let name = folded::frame_name(frame);
        if !is_annotated(&name) {
            native_colors.insert(&name, native_color(&name));
        }
    }

    let mut options = Options::default();
    options.colors = Palette::Multi(MultiPalette::Java);
    options.hash = true;
    options.palette_map = Some(&mut native_colors);
    options.title = title(profile, samples);
    options.subtitle = Some(subtitle(shown));
    options.count_name = "samples".to_owned();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// Whether a folded frame name ends with one of the annotations the java palette colours.
fn is_annotated(name: &str) -> bool {
    ["_[j]", "_[i]", "_[k]"]
        .iter()
        .any(|suffix| name.ends_with(suffix))
}

/// A red shade from the name's FNV-1a hash, within inferno's own red range (200-255 red,
/// 50-130 green and blue).
fn native_color(name: &str) -> Color {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let shade = (hash % 1000) as f64 / 1000.0;
    let r = 200 + (55.0 * shade) as u8;
    let gb = 50 + (80.0 * shade) as u8;
    Color { r, g: gb, b: gb }
}

/// "vmscope: jitvm (pid 100), 1000 samples": what was profiled, and how much was seen.
fn title(profile: &model::Profile, samples: u64) -> String {
    let session = profile.session.as_ref();
    let target = match session {
        Some(s) if s.system_wide => "the whole system".to_owned(),
        Some(s) if s.targets.len() > 3 => format!("{} processes", s.targets.len()),
        Some(s) if !s.targets.is_empty() => s
            .targets
            .iter()
            .map(|t| format!("{} (pid {})", t.command, t.pid))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "a profile".to_owned(),
    };
    format!("vmscope: {target}, {samples} samples")
}

fn subtitle(shown: &ShownStacks<'_>) -> String {
    let profile: &model::Profile = &shown.profile;
    let mut parts = Vec::new();
    if let Some(s) = &profile.session {
        parts.push(format!("session {} at {} Hz", s.id, s.frequency_hz));
    }
    parts.push(format!("{:.1} s", profile.duration_seconds));
    if profile.truncated_stacks > 0 {
        parts.push(format!(
            "{} samples with truncated stacks",
            profile.truncated_stacks
        ));
    }
    parts.push(shown.describe());
    parts.push("JIT code green, inlined aqua, kernel orange, native red".to_owned());
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_colours_are_red_and_stable() {
        for name in [
            "interpret",
            "Interpret",
            "libc.so.6+0x10",
            "java/lang/Object",
        ] {
            let c = native_color(name);
            assert_eq!(c, native_color(name));
            assert!(c.r >= 200 && c.g <= 130 && c.g == c.b, "{name}: {c:?}");
        }
        assert_ne!(native_color("interpret"), native_color("main"));
    }

    #[test]
    fn an_empty_profile_writes_nothing_and_says_why() {
        let mut out = Vec::new();
        let profile = model::Profile::default();
        let shown = ShownStacks::new(&profile, &Default::default());
        let err = render_flamegraph(&shown, &mut out).expect_err("no samples");
        assert!(err.to_string().contains("no samples"), "{err}");
        assert!(out.is_empty());
    }

    #[test]
    fn titles_name_the_targets() {
        let mut profile = model::Profile {
            session: Some(model::Session {
                targets: vec![model::TargetProcess {
                    pid: 42,
                    command: "node".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(title(&profile, 12), "vmscope: node (pid 42), 12 samples");
        if let Some(s) = profile.session.as_mut() {
            s.system_wide = true;
            s.targets.clear();
        }
        assert_eq!(title(&profile, 3), "vmscope: the whole system, 3 samples");
    }
}
