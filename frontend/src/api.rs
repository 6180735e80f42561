//! Calls to Kiln's HTTP API from the browser, and the shapes it answers.

use js_sys::Uint8Array;
use serde::Deserialize;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::Response;

pub use kiln_model::{
    LabelValues, MetricNames, MetricSeries, MetricSeriesSet, MetricValue, Timeline, TimelinePoint,
    TopFunction,
};

/// What the diff view reads of `/api/v1/compare`'s answer (the rest of
/// it is left unread): its functions, the significant first.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CompareAnswer {
    /// The functions listed.
    pub functions: Vec<ComparedFunction>,
}

/// One function of a [`CompareAnswer`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ComparedFunction {
    /// Its name.
    pub name: String,
    /// Its binary or module.
    #[serde(default)]
    pub module: Option<String>,
    /// Whether its share moved beyond sampling noise.
    pub significant: bool,
}

/// Every metric's series for an API query string (range and label
/// filters): the names the range holds, then each one's series, fetched
/// together; metrics none of whose series match the filters are left out.
pub async fn metric_series(query: &str) -> Result<Vec<MetricSeriesSet>, String> {
    let names: MetricNames =
        parse_json(get_bytes(&format!("/api/v1/metrics/names?{query}")).await?)?;
    let fetches = names.names.iter().map(|name| async move {
        let name = form_urlencoded::Serializer::new(String::new())
            .append_pair("name", name)
            .finish();
        let url = format!("/api/v1/metrics?{name}&{query}");
        parse_json::<MetricSeriesSet>(get_bytes(&url).await?)
    });
    let sets = futures_util::future::try_join_all(fetches).await?;
    Ok(sets.into_iter().filter(|s| !s.series.is_empty()).collect())
}

/// Reads a JSON answer of the API.
pub fn parse_json<T: for<'de> Deserialize<'de>>(bytes: Vec<u8>) -> Result<T, String> {
    serde_json::from_slice(&bytes).map_err(|e| format!("unexpected answer from the API: {e}"))
}

/// GETs `url` and returns the body, or an error naming the status and the
/// server's message.
pub async fn get_bytes(url: &str) -> Result<Vec<u8>, String> {
    let response = get(url).await?;
    let buffer = JsFuture::from(response.array_buffer().map_err(js_text)?)
        .await
        .map_err(js_text)?;
    Ok(Uint8Array::new(&buffer).to_vec())
}

async fn get(url: &str) -> Result<Response, String> {
    let window = web_sys::window().ok_or("no window")?;
    let response: Response = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|e| format!("cannot reach Kiln ({}): is `kiln up` running?", js_text(e)))?
        .unchecked_into();
    if response.status() == 401 {
        // No session, or it expired or its key was revoked: log in (the
        // page comes back here after).
        let _ = window.location().set_href("/login");
        return Err("not logged in: opening the login page".to_owned());
    }
    if !response.ok() {
        let message = body_text(&response).await.unwrap_or_default();
        return Err(format!(
            "{url} answered {} {}: {message}",
            response.status(),
            response.status_text()
        ));
    }
    Ok(response)
}

async fn body_text(response: &Response) -> Result<String, String> {
    let text = JsFuture::from(response.text().map_err(js_text)?)
        .await
        .map_err(js_text)?;
    Ok(text.as_string().unwrap_or_default())
}

/// The message of a JavaScript error value.
pub fn js_text(value: wasm_bindgen::JsValue) -> String {
    value
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| value.as_string())
        .unwrap_or_else(|| format!("{value:?}"))
}
