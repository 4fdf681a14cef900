//! Labels of what a program was doing when a sample was taken (`phase = compile`,
//! `tenant = acme`), as its threads set them: the domain a profile is grouped by (after
//! MetaSpy's domain-specific profilers, and pprof's labels).

use serde::{Deserialize, Serialize};

/// One label: a key and its value, as the program named them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Label {
    /// What it labels (`phase`).
    pub key: String,
    /// Its value (`compile`); never empty: a thread with no value for a key has no label of it.
    pub value: String,
}

impl Label {
    /// A label of `key` and `value`.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Label {
        Label {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// Which samples a profile keeps by their labels: those with every one of `labels` (`KEY=VALUE`;
/// `KEY=` for those without a label of `KEY`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelFilter {
    /// Each as `(key, value)`; an empty value asks for no label of the key.
    pub labels: Vec<(String, String)>,
}

/// Why a label filter cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelFilterError {
    /// Not `KEY=VALUE`.
    #[error("label filter {0:?} is not KEY=VALUE (KEY= for samples without a label of KEY)")]
    NoEquals(String),
    /// `=VALUE`.
    #[error("label filter {0:?} has no key")]
    NoKey(String),
}

impl LabelFilter {
    /// The filter of `KEY=VALUE` texts.
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<LabelFilter, LabelFilterError> {
        let labels = texts
            .iter()
            .map(|text| {
                let text = text.as_ref();
                let (key, value) = text
                    .split_once('=')
                    .ok_or_else(|| LabelFilterError::NoEquals(text.to_owned()))?;
                if key.is_empty() {
                    return Err(LabelFilterError::NoKey(text.to_owned()));
                }
                Ok((key.to_owned(), value.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(LabelFilter { labels })
    }

    /// Whether it keeps every sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Whether it keeps a sample whose labels are `labels`.
    pub fn keeps<'a>(&self, labels: impl Iterator<Item = &'a Label> + Clone) -> bool {
        self.labels.iter().all(|(key, value)| {
            let mut of_key = labels.clone().filter(|l| &l.key == key);
            if value.is_empty() {
                of_key.next().is_none()
            } else {
                of_key.any(|l| &l.value == value)
            }
        })
    }

    /// What it keeps, for a person: `phase=a, tenant unset`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    format!("{k} unset")
                } else {
                    format!("{k}={v}")
                }
            })
            .collect();
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_keep_samples_with_every_label_asked_and_none_of_the_unset() {
        let filter = LabelFilter::parse(&["phase=a", "tenant="]).unwrap();
        let a = [Label::new("phase", "a")];
        let a_acme = [Label::new("phase", "a"), Label::new("tenant", "acme")];
        let b = [Label::new("phase", "b")];
        assert!(filter.keeps(a.iter()));
        assert!(!filter.keeps(a_acme.iter()), "tenant is set");
        assert!(!filter.keeps(b.iter()));
        assert!(!filter.keeps([].iter()), "no phase");
        assert!(LabelFilter::default().keeps(b.iter()));
        assert_eq!(filter.describe(), "phase=a, tenant unset");
        assert_eq!(
            LabelFilter::parse(&["phase"]),
            Err(LabelFilterError::NoEquals("phase".into()))
        );
        assert_eq!(
            LabelFilter::parse(&["=a"]),
            Err(LabelFilterError::NoKey("=a".into()))
        );
    }
}
