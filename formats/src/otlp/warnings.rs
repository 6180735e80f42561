//! What a conversion tells the sender without refusing anything: the
//! layout note, labels left out, unknown frame types, missing periods.

use std::collections::HashSet;

/// Most warnings kept; the rest are counted.
const MAX_WARNINGS: usize = 16;

/// Distinct warnings, the first [`MAX_WARNINGS`] kept.
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    kept: Vec<String>,
    seen: HashSet<String>,
    more: usize,
}

impl Warnings {
    /// Records `warning` unless it was already.
    pub(crate) fn once(&mut self, warning: String) {
        if self.seen.contains(&warning) {
            return;
        }
        if self.kept.len() < MAX_WARNINGS {
            self.seen.insert(warning.clone());
            self.kept.push(warning);
        } else {
            self.seen.insert(warning);
            self.more += 1;
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.kept.len() + self.more
    }

    /// The warnings, and "and N more" when some were not kept.
    pub(crate) fn into_vec(self) -> Vec<String> {
        let mut kept = self.kept;
        if self.more > 0 {
            kept.push(format!("and {} more", self.more));
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_distinct_and_capped() {
        let mut w = Warnings::default();
        for i in 0..20 {
            w.once(format!("w{i}"));
            w.once(format!("w{i}"));
        }
        assert_eq!(w.len(), 20);
        let all = w.into_vec();
        assert_eq!(all.len(), MAX_WARNINGS + 1);
        assert_eq!(all.last().map(String::as_str), Some("and 4 more"));
    }
}
