//! `vmscope report --group-by label:KEY`: one report per value of a label, after MetaSpy's
//! domain-specific profilers: where the time went *for* each phase, tenant or request kind,
//! each block built by the daemon from that value's samples alone (`--label KEY=VALUE`), so
//! that its sections, ranges and trees are its own.

use std::io::Write;

use vmscope_model::Profile;

use super::{Format, ReportOptions, render_profile};

/// One value of the label grouped by, or the samples without it.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelGroup {
    /// The label's key.
    pub key: String,
    /// Its value; `None` for the samples whose thread had no label of the key.
    pub value: Option<String>,
    /// The group's share of the profile's main measure (its samples, for a CPU profile).
    pub weight: u64,
    /// That share in percent of the whole profile's.
    pub percent: f64,
}

impl LabelGroup {
    /// The `--label` filter of its samples: `KEY=VALUE`, or `KEY=` for those without one.
    pub fn filter(&self) -> String {
        format!("{}={}", self.key, self.value.as_deref().unwrap_or(""))
    }

    /// Its title: `phase=a`, or `phase unset`.
    pub fn title(&self) -> String {
        match &self.value {
            Some(value) => format!("{}={value}", self.key),
            None => format!("{} unset", self.key),
        }
    }
}

/// The groups of `profile`'s samples by the value of label `key`: most weight first, then the
/// samples without the label (when any). Values that weigh nothing are left out.
pub fn label_groups(profile: &Profile, key: &str) -> Vec<LabelGroup> {
    let mut weights: std::collections::BTreeMap<Option<&str>, u64> = Default::default();
    let mut total = 0u64;
    for stack in &profile.stacks {
        let weight = profile.main_of(stack);
        total = total.saturating_add(weight);
        *weights.entry(profile.label_of(stack, key)).or_insert(0) += weight;
    }
    let percent = |w: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * w as f64 / total as f64
        }
    };
    let unset = weights.remove(&None).unwrap_or(0);
    let mut groups: Vec<LabelGroup> = weights
        .into_iter()
        .filter(|&(_, w)| w > 0)
        .map(|(value, weight)| LabelGroup {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            weight,
            percent: percent(weight),
        })
        .collect();
    groups.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.value.cmp(&b.value)));
    if unset > 0 {
        groups.push(LabelGroup {
            key: key.to_owned(),
            value: None,
            weight: unset,
            percent: percent(unset),
        });
    }
    groups
}

/// Writes each group's report under its title (text), or all of them as one JSON object:
/// `group_by`, `total`, and `groups`, each with `key`, `value` (null when unset), `weight`,
/// `percent` and `report` (the JSON report of its samples).
pub fn render_groups(
    whole: &Profile,
    key: &str,
    groups: &[(LabelGroup, Profile)],
    options: &ReportOptions,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let (measure, _) = whole.main_value();
    let total: u64 = whole.stacks.iter().map(|s| whole.main_of(s)).sum();
    if format == Format::Json {
        let mut blocks = Vec::with_capacity(groups.len());
        for (group, profile) in groups {
            let mut bytes = Vec::new();
            render_profile(profile, options, Format::Json, &mut bytes)?;
            let report: serde_json::Value = serde_json::from_slice(&bytes)?;
            blocks.push(serde_json::json!({
                "key": group.key,
                "value": group.value,
                "weight": group.weight,
                "percent": group.percent,
                "report": report,
            }));
        }
        let object = serde_json::json!({
            "group_by": format!("label:{key}"),
            "measure": measure.name(),
            "total": total,
            "groups": blocks,
        });
        serde_json::to_writer_pretty(&mut *out, &object)?;
        writeln!(out)?;
        return Ok(());
    }
    if groups.is_empty() {
        writeln!(
            out,
            "no samples to group by label {key}: the profile has {} samples",
            whole.total_samples
        )?;
        return Ok(());
    }
    for (i, (group, profile)) in groups.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "=== label {}: {:.1}% of the {} ({} of {}) ===",
            group.title(),
            group.percent,
            measure.name(),
            group.weight,
            total
        )?;
        render_profile(profile, options, Format::Text, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscope_model::{Label, Stack};

    /// Groups come most samples first, the unlabelled last, each with its share.
    #[test]
    fn groups_are_the_label_s_values_then_the_unlabelled() {
        let stack = |samples: u64, labels: Vec<u32>| Stack {
            values: vec![samples],
            labels,
            ..Stack::default()
        };
        let profile = Profile {
            labels: vec![
                Label::new("phase", "a"),
                Label::new("phase", "b"),
                Label::new("tenant", "x"),
            ],
            stacks: vec![
                stack(30, vec![1]),
                stack(50, vec![0, 2]),
                stack(15, vec![2]),
                stack(5, vec![]),
            ],
            ..Profile::default()
        };
        let groups = label_groups(&profile, "phase");
        let got: Vec<(Option<&str>, u64, String)> = groups
            .iter()
            .map(|g| (g.value.as_deref(), g.weight, g.filter()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("a"), 50, "phase=a".to_owned()),
                (Some("b"), 30, "phase=b".to_owned()),
                (None, 20, "phase=".to_owned()),
            ]
        );
        assert!((groups[0].percent - 50.0).abs() < 1e-9);
        assert_eq!(groups[2].title(), "phase unset");
    }
}
