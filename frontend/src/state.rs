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

/// The part of the graph on screen after zooming and panning: a link
/// with it opens on the same view.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Span {
    /// Left edge, as a fraction (0 to 1) of the whole graph's width, so
    /// that the link still fits when the range has gained samples since.
    pub x0: f64,
    /// Right edge, as a fraction of the width.
    pub x1: f64,
    /// Depth shown in the first row (vertical scroll); 0 shows the root.
    pub first_row: f64,
}

impl Span {
    /// The span in URL form: `x0,x1` and, when scrolled, `,first_row`.
    fn to_param(self) -> String {
        let mut text = format!("{},{}", short(self.x0), short(self.x1));
        if self.first_row != 0.0 {
            text.push(',');
            text.push_str(&short(self.first_row));
        }
        text
    }

    /// Reads [`to_param`](Self::to_param)'s form; `None` for anything
    /// that is not a span within the graph.
    fn from_param(text: &str) -> Option<Self> {
        let mut numbers = text.split(',').map(|n| n.trim().parse::<f64>().ok());
        let x0 = numbers.next()??;
        let x1 = numbers.next()??;
        let first_row = numbers.next().map_or(Some(0.0), |n| n)?;
        let sane = (0.0..1.0).contains(&x0)
            && x1 > x0
            && x1 <= 1.0
            && first_row.is_finite()
            && first_row >= 0.0;
        (sane && numbers.next().is_none()).then_some(Self { x0, x1, first_row })
    }
}

/// `v` with at most 12 decimals and no trailing zeros: a millionth of a
/// million-node graph's width still round-trips, and URLs stay short.
fn short(v: f64) -> String {
    let text = format!("{v:.12}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
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
    /// Zoom and pan on top of the focus; `None` shows the focused node (or
    /// the whole graph) as it is.
    pub span: Option<Span>,
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
    /// GPU kernel whose SASS instructions are open (its name as the API
    /// gives it).
    pub kernel: String,
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
                "view" => state.span = Span::from_param(&value),
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
                "kernel" => state.kernel = value,
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
        text("view", &self.span.map(Span::to_param).unwrap_or_default());
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
        text("kernel", &self.kernel);
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

    /// The API query string of `/api/v1/compare` for the diff: the
    /// baseline's range against the current one, both with the label
    /// filters. The flagged come first in its answer, so a limit of 2000
    /// holds them all but in a diff where nearly everything moved; the
    /// rest of the answer is not read.
    pub fn compare_api_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (side, from, to) in [
            ("base", &self.base_from, &self.base_to),
            ("target", &self.from, &self.to),
        ] {
            if !from.is_empty() {
                q.append_pair(&format!("{side}_from"), from);
            }
            if !to.is_empty() {
                q.append_pair(&format!("{side}_to"), to);
            }
        }
        for (name, value) in &self.labels {
            q.append_pair(name, value);
        }
        q.append_pair("limit", "2000");
        q.finish()
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

    /// The API query string of the open kernel's instructions
    /// (`kernel=…&from=…`), `None` when no kernel is open.
    pub fn kernel_api_query(&self) -> Option<String> {
        if self.kernel.is_empty() {
            return None;
        }
        let kernel = form_urlencoded::Serializer::new(String::new())
            .append_pair("kernel", &self.kernel)
            .finish();
        Some(format!("{kernel}&{}", self.api_query()))
    }

    /// Whether the diff view is on.
    pub fn diffing(&self) -> bool {
        !self.base_from.is_empty()
    }
}

/// The range of the same length just before `from..to` (for the diff's
/// default baseline): `now-1h..now` gives `now-2h..now-1h`; unix seconds
/// shift by the span.
pub fn previous_range(from: &str, to: &str) -> (String, String) {
    if let (Ok(a), Ok(b)) = (from.parse::<f64>(), to.parse::<f64>()) {
        let span = b - a;
        return (format!("{:.3}", a - span), format!("{a:.3}"));
    }
    let from = if from.is_empty() { "now-1h" } else { from };
    match (from.strip_prefix("now-"), to.is_empty() || to == "now") {
        (Some(ago), true) => {
            // `now-1h` → `now-2h`: double the amount, keep the unit.
            let digits: String = ago.chars().take_while(char::is_ascii_digit).collect();
            let unit = &ago[digits.len()..];
            match digits.parse::<u64>() {
                Ok(n) => (format!("now-{}{unit}", 2 * n), from.to_owned()),
                Err(_) => (from.to_owned(), "now".to_owned()),
            }
        }
        _ => (from.to_owned(), to.to_owned()),
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
            span: Some(Span {
                x0: 0.125,
                x1: 0.500_000_123_456,
                first_row: 2.5,
            }),
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
            kernel: "_Z4gemmPfS_i".into(),
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
        assert_eq!(
            state.compare_api_query(),
            "base_from=now-4h&base_to=now-2h&target_from=now-2h&target_to=1763712000\
             &process=nginx+%26+co&limit=2000"
        );
        assert_eq!(
            state.kernel_api_query().as_deref(),
            Some("kernel=_Z4gemmPfS_i&from=now-2h&to=1763712000&process=nginx+%26+co")
        );
        assert_eq!(ViewState::default().kernel_api_query(), None);
    }

    #[test]
    fn spans_are_short_in_urls_and_nonsense_is_ignored() {
        let span = Span {
            x0: 0.25,
            x1: 0.5,
            first_row: 0.0,
        };
        assert_eq!(span.to_param(), "0.25,0.5");
        assert_eq!(Span::from_param("0.25,0.5"), Some(span));
        assert_eq!(Span::from_param("0,1,3").map(|s| s.first_row), Some(3.0));
        for bad in [
            "",
            "0.5",
            "0.5,0.25",
            "0,2",
            "-1,0.5",
            "0,0.5,-1",
            "0,0.5,1,2",
            "a,b",
            "0,NaN",
        ] {
            assert_eq!(Span::from_param(bad), None, "{bad:?}");
        }
        let state = ViewState::from_query("view=0.1,0.2,4");
        assert_eq!(state.to_query(), "view=0.1%2C0.2%2C4");
    }

    #[test]
    fn the_baseline_is_the_range_before() {
        assert_eq!(
            previous_range("now-1h", ""),
            ("now-2h".to_owned(), "now-1h".to_owned())
        );
        assert_eq!(
            previous_range("100", "160"),
            ("40.000".to_owned(), "100.000".to_owned())
        );
        assert_eq!(
            previous_range("", ""),
            ("now-2h".to_owned(), "now-1h".to_owned())
        );
    }

    #[test]
    fn defaults_make_an_empty_query() {
        assert_eq!(ViewState::default().to_query(), "");
        assert_eq!(ViewState::from_query("?bogus=1"), ViewState::default());
    }
}
