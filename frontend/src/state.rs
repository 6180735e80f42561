//! Everything the user set, kept in the page's query string so that a link
//! reproduces the view.

use std::collections::BTreeMap;

/// How frames are coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorBy {
    /// By kind of code: kernel, native, interpreted, GPU.
    #[default]
    Kind,
    /// By binary (module), so one library reads as one colour.
    Binary,
}

/// The view, as the URL says it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ViewState {
    /// Start of the time range (as the API takes it: RFC 3339, unix
    /// seconds, `now-1h`); empty means the API's default (an hour ago).
    pub from: String,
    /// End of the time range; empty means now.
    pub to: String,
    /// Label filters (`process` → `nginx`).
    pub labels: BTreeMap<String, String>,
    /// The focused node, by the names on its path below the root.
    pub focus: Vec<String>,
    /// Search text.
    pub search: String,
    /// Icicle orientation (root at the top).
    pub icicle: bool,
    /// Colouring.
    pub color: ColorBy,
    /// Function whose sandwich is open.
    pub sandwich: String,
    /// Baseline range of the diff view; the diff is off when `base_from`
    /// is empty.
    pub base_from: String,
    /// End of the baseline range.
    pub base_to: String,
    /// Collapse direct recursion.
    pub collapse_recursion: bool,
    /// Regex of frames (function or binary) to hide.
    pub hide: String,
    /// Regex of frames to merge into one.
    pub merge: String,
    /// Light theme (dark is the default).
    pub light: bool,
}

/// Prefix of label filters in the page URL (`label.process=nginx`), so that
/// a label can never collide with a view setting.
const LABEL_PREFIX: &str = "label.";

impl ViewState {
    /// Reads a query string (with or without the leading `?`); unknown
    /// keys are ignored.
    pub fn from_query(query: &str) -> Self {
        let mut state = Self::default();
        let query = query.strip_prefix('?').unwrap_or(query);
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match key.as_ref() {
                "from" => state.from = value,
                "to" => state.to = value,
                "focus" => {
                    state.focus = value
                        .split(';')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                }
                "search" => state.search = value,
                "icicle" => state.icicle = value == "1",
                "color" => {
                    state.color = match value.as_str() {
                        "binary" => ColorBy::Binary,
                        _ => ColorBy::Kind,
                    }
                }
                "fn" => state.sandwich = value,
                "base_from" => state.base_from = value,
                "base_to" => state.base_to = value,
                "collapse" => state.collapse_recursion = value == "1",
                "hide" => state.hide = value,
                "merge" => state.merge = value,
                "theme" => state.light = value == "light",
                other => {
                    if let Some(label) = other.strip_prefix(LABEL_PREFIX) {
                        state.labels.insert(label.to_owned(), value);
                    }
                }
            }
        }
        state
    }

    /// The query string of this state (without `?`), only what differs from
    /// the defaults.
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        let mut text = |key: &str, value: &str| {
            if !value.is_empty() {
                q.append_pair(key, value);
            }
        };
        text("from", &self.from);
        text("to", &self.to);
        text("focus", &self.focus.join(";"));
        text("search", &self.search);
        text("icicle", if self.icicle { "1" } else { "" });
        text(
            "color",
            if self.color == ColorBy::Binary {
                "binary"
            } else {
                ""
            },
        );
        text("fn", &self.sandwich);
        text("base_from", &self.base_from);
        text("base_to", &self.base_to);
        text("collapse", if self.collapse_recursion { "1" } else { "" });
        text("hide", &self.hide);
        text("merge", &self.merge);
        text("theme", if self.light { "light" } else { "" });
        for (name, value) in &self.labels {
            text(&format!("{LABEL_PREFIX}{name}"), value);
        }
        q.finish()
    }

    /// The API query string for this state's range and filters
    /// (`from=…&to=…&process=nginx`).
    pub fn api_query(&self) -> String {
        self.range_query(&self.from, &self.to)
    }

    /// The API query string of the diff's baseline range.
    pub fn base_api_query(&self) -> String {
        self.range_query(&self.base_from, &self.base_to)
    }

    fn range_query(&self, from: &str, to: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if !from.is_empty() {
            q.append_pair("from", from);
        }
        if !to.is_empty() {
            q.append_pair("to", to);
        }
        for (name, value) in &self.labels {
            q.append_pair(name, value);
        }
        q.finish()
    }

    /// Whether the diff view is on.
    pub fn diffing(&self) -> bool {
        !self.base_from.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_survives_the_url() {
        let state = ViewState {
            from: "now-2h".into(),
            to: "1763712000".into(),
            labels: BTreeMap::from([("process".into(), "nginx & co".into())]),
            focus: vec!["main".into(), "parse".into()],
            search: "parse|lex".into(),
            icicle: true,
            color: ColorBy::Binary,
            sandwich: "parse".into(),
            base_from: "now-4h".into(),
            base_to: "now-2h".into(),
            collapse_recursion: true,
            hide: "^std::".into(),
            merge: "libc".into(),
            light: true,
        };
        let query = state.to_query();
        assert_eq!(ViewState::from_query(&format!("?{query}")), state);
        assert!(state.diffing());
        assert_eq!(
            state.api_query(),
            "from=now-2h&to=1763712000&process=nginx+%26+co"
        );
        assert_eq!(
            state.base_api_query(),
            "from=now-4h&to=now-2h&process=nginx+%26+co"
        );
    }

    #[test]
    fn defaults_make_an_empty_query() {
        assert_eq!(ViewState::default().to_query(), "");
        assert_eq!(ViewState::from_query("?bogus=1"), ViewState::default());
    }
}
