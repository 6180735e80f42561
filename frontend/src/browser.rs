//! The page's own address and downloads: what the view reads from and
//! writes to the browser.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

/// The page's query string (with its `?`).
pub fn current_query() -> String {
    window().location().search().unwrap_or_default()
}

/// Puts `query` in the address bar without a reload or a history entry.
pub fn replace_query(query: &str) {
    let url = if query.is_empty() {
        window()
            .location()
            .pathname()
            .unwrap_or_else(|_| "/".into())
    } else {
        format!("?{query}")
    };
    if let Ok(history) = window().history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
    }
}

/// Downloads `url` as `file_name`.
pub fn download(url: &str, file_name: &str) {
    let Ok(element) = document().create_element("a") else {
        return;
    };
    let Ok(anchor) = element.dyn_into::<web_sys::HtmlAnchorElement>() else {
        return;
    };
    anchor.set_href(url);
    anchor.set_download(file_name);
    anchor.click();
}

/// An object URL holding `text` of type `mime`.
pub fn blob_url(text: &str, mime: &str) -> Option<String> {
    let parts = js_sys::Array::of1(&text.into());
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options).ok()?;
    web_sys::Url::create_object_url_with_blob(&blob).ok()
}
