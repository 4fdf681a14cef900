//! A profile cut to samples by their labels (`vmscope report --label phase=a`, and each block
//! of `--group-by label:phase`): the snapshot keeps only the samples whose thread had those
//! labels set, so that every number the profile is built from, its rows and bytecode ranges
//! included, is theirs alone.

use vmscope_model::LabelFilter;

use super::{SessionError, Snapshot};
use crate::stats::vm::{MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES, MAX_LABELS};

/// A filter from a request's `KEY=VALUE` texts, refused beyond the protocol's bounds (a label
/// longer than any set may hold matches nothing, and is a mistake to say so).
pub fn label_filter(texts: &[String]) -> Result<LabelFilter, SessionError> {
    let invalid = |m: String| Err(SessionError::InvalidArgument(m));
    if texts.len() > 2 * MAX_LABELS {
        return invalid(format!(
            "{} label filters; a profile takes at most {}",
            texts.len(),
            2 * MAX_LABELS
        ));
    }
    let filter =
        LabelFilter::parse(texts).map_err(|e| SessionError::InvalidArgument(e.to_string()))?;
    for (key, value) in &filter.labels {
        if key.len() > MAX_LABEL_KEY_BYTES || value.len() > MAX_LABEL_VALUE_BYTES {
            return invalid(format!(
                "label filter {key}={value}: keys hold at most {MAX_LABEL_KEY_BYTES} bytes, \
                 values {MAX_LABEL_VALUE_BYTES}"
            ));
        }
    }
    Ok(filter)
}

impl Snapshot {
    /// The snapshot of the samples `filter` keeps alone: their counts, sends, and kept
    /// samples. Blocks off the CPU carry no labels: a filter that asks for a label keeps
    /// none of them. Its CPU time is what its samples stand for.
    pub fn only_labels(mut self, filter: &LabelFilter) -> Snapshot {
        if filter.is_empty() {
            return self;
        }
        let stacks = &self.stacks;
        let keeps: Vec<bool> = (0..stacks.stacks.len())
            .map(|i| filter.keeps(stacks.labels_of(super::StackId(i as u32)).iter()))
            .collect();
        let kept = |stack: super::StackId| keeps[stack.0 as usize];
        self.stacks.counts.retain(|&(_, stack, _)| kept(stack));
        self.stacks.sends.retain(|&(_, stack, _)| kept(stack));
        self.stacks.blocks.retain(|&(_, stack, ..)| kept(stack));
        self.kept = self
            .kept
            .iter()
            .map(|chunk| chunk.iter().filter(|s| kept(s.stack)).cloned().collect())
            .collect();
        self.recount();
        self.label_filter = Some(filter.describe());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_bounded_as_labels_are() {
        assert!(label_filter(&["phase=a".into(), "tenant=".into()]).is_ok());
        assert!(label_filter(&["phase".into()]).is_err());
        assert!(label_filter(&[format!("{}=a", "k".repeat(MAX_LABEL_KEY_BYTES + 1))]).is_err());
        assert!(label_filter(&vec!["a=b".to_string(); 2 * MAX_LABELS + 1]).is_err());
    }
}
